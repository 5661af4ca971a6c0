"""The head's rendezvous record: where a cloud run's head answers now, one small JSON file in the run's store.

It lives beside the run's mirror, `<parent of --output>/.yeto-head/<run>/head.json` (infra/head/rendezvous.py writes
it), and holds no secret: the run, the bus URL, when it was written. A cloud island's learner reads it when its bus
has been away a while (learners/transport/rendezvous.py), so it is hostile input: at most MAX_BYTES, one JSON
object of this run, a URL of the form `scheme://host:port` and nothing more (no user, path, query or fragment), in
the scheme the learner already speaks (a tls:// learner is never sent to a plain nats:// one).
"""
from __future__ import annotations

import ipaddress
import json
import re

FILE = "head.json"
MAX_BYTES = 4096
SCHEMES = ("tls", "nats")
_URL = re.compile(r"^(tls|nats)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$")
_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def check_url(url: object, scheme: str | None = None) -> str:
    """`url` when it is `scheme://host:port` (a DNS name, an IPv4 or a bracketed IPv6 address; port 1 to 65535),
    else ValueError saying why. With `scheme`, the URL must speak it."""
    if not isinstance(url, str) or len(url) > 270 or not (m := _URL.match(url)):
        raise ValueError(f"its url {str(url)[:80]!r} is not of the form tls://host:port")
    kind, host, port = m.group(1), m.group(2), int(m.group(3))
    if scheme is not None and kind != scheme:
        raise ValueError(f"its url speaks {kind}://, not {scheme}:// as this learner's bus does")
    if not 1 <= port <= 65535:
        raise ValueError(f"its url's port {port} is not a TCP port")
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ValueError(f"its url's host {host[:60]!r} is not an IPv6 address") from None
    elif not all(_LABEL.match(label) for label in host.split(".")):
        raise ValueError(f"its url's host {host[:60]!r} is not a host name or address")
    return url


def record(run_id: str, url: str, written_at: float) -> bytes:
    """The file's bytes (strict writer: the URL checked as a reader will check it)."""
    return json.dumps({"run_id": run_id, "url": check_url(url), "written_at": written_at}).encode()


def head_url(raw: bytes, run_id: str, scheme: str | None = None) -> str:
    """The URL a rendezvous file names for run `run_id`, else ValueError saying why the file is unusable."""
    if len(raw) > MAX_BYTES:
        raise ValueError(f"it is larger than {MAX_BYTES} bytes")
    try:
        data = json.loads(raw)
    except ValueError:
        raise ValueError("it is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("it is not a JSON object")
    if data.get("run_id") != run_id:
        raise ValueError(f"it names run {str(data.get('run_id'))[:80]!r}, not {run_id!r}")
    return check_url(data.get("url"), scheme)
