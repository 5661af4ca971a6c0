"""A cloud island's learner follows its run's head to a new address, through the rendezvous in the run's store.

The head's rendezvous (schemas/head_rendezvous.py; infra/head/rendezvous.py writes it) names the address the run's
head answers at now. A learner given its place (`--head-rendezvous`) reads it once before its first connection, and
again whenever its bus has been away FOLLOW_S seconds (at most every READ_EVERY_S while it stays away); a usable,
new address becomes the connection's only server, and the client's own reconnection (same credential, same pinned
certificate, same subscriptions) goes there. The head's certificate is pinned, not matched to the address, so it
verifies wherever the replacement answers. The store is read with fsspec and this machine's store credentials
(SkyPilot copies them to every VM). The file is hostile input: a missing, oversized, garbage or other run's file,
or one naming the address retried already, leaves the connection retrying the address it knows, said in one line
(once per reason).
"""
from __future__ import annotations

import asyncio
import os
import sys
from typing import Any
from urllib.parse import urlsplit

from yeto.schemas.head_rendezvous import MAX_BYTES, head_url

FOLLOW_S = 20.0        # the bus away this long: the head may have moved (a restarting nats-server is back sooner)
READ_EVERY_S = 5.0     # then the store is read at most this often while the bus stays away (a GET: cheap)
CHECK_S = 1.0


_SAID: set[str] = set()


def say(line: str, *, once: bool = False) -> None:
    """A line on the learner's stderr; with `once`, not again in this process (its transport and its log handler
    each connect, and each reads the rendezvous before)."""
    if once and line in _SAID:
        return
    _SAID.add(line)
    print(f"learner: {line}", file=sys.stderr, flush=True)


def read(where: str, run_id: str, scheme: str | None = None) -> str:
    """The head URL the rendezvous at `where` names; ValueError (or OSError from the store) saying why not."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(where if "://" in where else os.path.expanduser(where))
    try:
        with fs.open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ValueError("it does not exist (yet)") from None
    return head_url(raw, run_id, scheme)


def start_url(where: str, run_id: str, given: str) -> str:
    """The address to connect to first: the rendezvous's when it names a usable one, else `given`."""
    try:
        url = read(where, run_id, urlsplit(given.split(",")[0]).scheme)
    except (ValueError, OSError) as e:
        say(f"head rendezvous {where} unusable ({e}): connecting to {given}", once=True)
        return given
    if url != given:
        say(f"head rendezvous {where} names {url}: connecting there, not to {given}", once=True)
    return url


async def follow(nc: Any, where: str, run_id: str, url: str, *, follow_s: float = FOLLOW_S,
                 read_every_s: float = READ_EVERY_S, check_s: float = CHECK_S) -> None:
    """While the NATS client `nc` lives: once it has been away `follow_s`, read the rendezvous (at most every
    `read_every_s`) and point `nc` at a new address it names. Cancel it to stop."""
    loop, scheme = asyncio.get_running_loop(), urlsplit(url.split(",")[0]).scheme
    away_since = last_read = None
    said = ""
    while not nc.is_closed:
        await asyncio.sleep(check_s)
        now = loop.time()
        if nc.is_connected:
            away_since = None
            continue
        away_since = away_since if away_since is not None else now
        if now - away_since < follow_s or (last_read is not None and now - last_read < read_every_s):
            continue
        last_read = now
        try:
            new = await asyncio.to_thread(read, where, run_id, scheme)
            why = f"it names {new}, the address retried already" if new == url else ""
        except (ValueError, OSError) as e:
            why = str(e)
        if not why:
            nc.set_server_pool([new])
            say(f"bus away {now - away_since:.0f}s; head rendezvous {where} names {new}: reconnecting there "
                f"(was {url})")
            url, said = new, ""
        elif why != said:
            say(f"bus away {now - away_since:.0f}s; head rendezvous {where} unusable ({why}): retrying {url}")
            said = why
