"""A cloud island's learner follows its run's head to a new address, through the rendezvous in the run's store.

The head's rendezvous (schemas/head_rendezvous.py; infra/head/rendezvous.py writes it) names the address the run's
head answers at now. A learner given its place (`--head-rendezvous`) reads it once before its first connection, and
again whenever its bus has been away FOLLOW_S seconds, then after FOLLOW_S doubled on each read up to READ_EVERY_S while
it stays away (away 1, 2, 4, 8, 13, 18 ... s: as often as before once away 20 s, where the first read used to be); a
usable, new address becomes the connection's only server, and the client's own reconnection (same credential, same
pinned certificate, same subscriptions) goes there. A process's two connections (its transport's and its log
handler's) share one read of the store within SHARED_S. (It was read only once the bus had been away 20 s: in `yeto
recover`'s rehearsal of 2026-12-06 a replacement started 4.0 s after its predecessor's loss merged its first global
28.7 s after it.) The head's certificate is pinned, not matched to the address, so it
verifies wherever the replacement answers. The store is read with fsspec and this machine's store credentials
(SkyPilot copies them to every VM). The file is hostile input: a missing, oversized, garbage or other run's file,
or one naming the address retried already, leaves the connection retrying the address it knows, said in one line
(once per reason).
"""
from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from yeto.schemas.head_rendezvous import MAX_BYTES, head_url

FOLLOW_S = 1.0         # the bus away this long: the head may have moved (a reconnection to a live server takes less)
READ_EVERY_S = 5.0     # then read after FOLLOW_S, doubled on each read up to this, while the bus stays away (a GET: cheap)
QUIET_S = 20.0         # a rendezvous naming the address retried already is said once the bus is away this long
SHARED_S = 1.0         # a read of the store this recent serves the process's other connection too
CHECK_S = 0.25


_SAID: set[str] = set()
_READS: dict[tuple[str, str, str | None], tuple[float, str, str]] = {}     # (when, the URL read, why none)
_READING = threading.Lock()


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


def read_shared(where: str, run_id: str, scheme: str | None, fresh_s: float = SHARED_S) -> str:
    """`read`, or the result of one this process made less than `fresh_s` ago (its other connection's); ValueError
    saying why none."""
    key = (where, run_id, scheme)
    with _READING:
        at, url, why = _READS.get(key, (float("-inf"), "", ""))
        if time.monotonic() - at >= fresh_s:
            try:
                url, why = read(where, run_id, scheme), ""
            except (ValueError, OSError) as e:
                url, why = "", str(e)
            _READS[key] = (time.monotonic(), url, why)
    if why:
        raise ValueError(why)
    return url


def read_after(follow_s: float = FOLLOW_S, read_every_s: float = READ_EVERY_S) -> Iterator[float]:
    """How long the bus has been away at each read of the rendezvous: `follow_s`, then after gaps from `follow_s`
    doubled up to `read_every_s` (1, 2, 4, 8, 13, 18, 23 ... s)."""
    at, gap = follow_s, follow_s
    while True:
        yield at
        at, gap = at + gap, min(2 * gap, read_every_s)


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
                 read_every_s: float = READ_EVERY_S, check_s: float = CHECK_S, quiet_s: float = QUIET_S) -> None:
    """While the NATS client `nc` lives: once it has been away `follow_s`, read the rendezvous (again after `follow_s`,
    doubled on each read up to `read_every_s`, while it stays away) and point `nc` at a new address it names. Cancel it
    to stop. A rendezvous naming `url` still (the replacement not named yet, or a server back soon) is said only once
    the bus is away `quiet_s`."""
    loop, scheme = asyncio.get_running_loop(), urlsplit(url.split(",")[0]).scheme
    away_since: float | None = None
    due, reads, said = 0.0, read_after(follow_s, read_every_s), ""
    while not nc.is_closed:
        await asyncio.sleep(check_s)
        now = loop.time()
        if nc.is_connected:
            away_since = None
            continue
        if away_since is None:
            away_since, reads = now, read_after(follow_s, read_every_s)
            due = next(reads)
        if now - away_since < due:
            continue
        while due <= now - away_since:       # a slow read of the store: the reads it overran are not made up
            due = next(reads)
        stale = False
        try:
            new = await asyncio.to_thread(read_shared, where, run_id, scheme, min(follow_s, SHARED_S))
            stale = new == url
            why = f"it names {new}, the address retried already" if stale else ""
        except (ValueError, OSError) as e:
            why = str(e)
        if not why:
            nc.set_server_pool([new])
            say(f"bus away {now - away_since:.0f}s; head rendezvous {where} names {new}: reconnecting there "
                f"(was {url})")
            url, said = new, ""
        elif why != said and (not stale or now - away_since >= quiet_s):
            say(f"bus away {now - away_since:.0f}s; head rendezvous {where} unusable ({why}): retrying {url}")
            said = why
