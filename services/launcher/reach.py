"""Which bus URL an island's learners get, and why a cloud island cannot start with the one it would get (pure).

Local islands share the launcher's host and use its own URL. A cloud island gets the run's public URL,
the recipe's `bus_url` (the head's `tls://<addr>:4222`): with none, or a loopback one, its learners
could never connect, so the launcher refuses to start it and the island ends with the reason on the tape.
"""
from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.services.launcher.state import backend_of

FIX = "cloud islands reach the run's head at its public address: launch them with `yeto launch`, which starts the head"


def island_url(spec: dict[str, Any], recipe: dict[str, Any], launcher_url: str) -> str:
    return launcher_url if backend_of(spec) == "local" else LaunchRecipe.upcast(recipe).bus_url


def unreachable(spec: dict[str, Any], recipe: dict[str, Any]) -> str:
    """Why an island of this fleet entry could not reach the bus at its URL ("" when it can; always for local ones)."""
    if backend_of(spec) in ("local", "external"):    # an external learner's URL is in its join token
        return ""
    urls = LaunchRecipe.upcast(recipe).bus_url
    if not urls:
        return f"no bus URL for a cloud island (the run's recipe has no bus_url); {FIX}"
    return next(filter(None, map(_unreachable_url, urls.split(","))), "")   # a head over several VMs: every node's


def _unreachable_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        where = f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return f"bus URL {url!r} is not a URL; {FIX}"
    if not host:
        return f"bus URL {where} names no host; {FIX}"
    if host == "localhost" or host.endswith(".localhost") or _loopback(host):
        return f"bus URL {where} is a loopback address no cloud island can reach; {FIX}"
    return ""


def _loopback(host: str) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False        # a name: resolved where the island runs, not here
    return ip.is_loopback or ip.is_unspecified
