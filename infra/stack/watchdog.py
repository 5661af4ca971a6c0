"""The stack's watchdog: a component of every stack (local or head) that starts again a component that died without a
stop, with a backoff, and puts each restart on the tape (`ComponentRestarted`, run `_`).

Why: a stack's processes are detached (components.spawn, the fork server), so nothing was their parent once `stack up`
returned; a service that crashed stayed down until someone ran `yeto stack up` again. On a head that is hours of a run
with no launcher (no island replaced), no finalizer (no artifact) or no tape writer (a tape that stops), and two
instances of each service over three nodes gave redundancy only until the first crash.

What it does, once a second (`POLL_S`): reads the stack record (stack.json) and checks every component it names by pid
and start time (a pid reused by a stranger reads as dead). One that is dead is started again under the record's lock
(the lock `up` and `down` hold), exactly as `stack up` starts it, after a backoff that grows with its recent crashes
(`delay`: 0 s for the first, then 1, 2, 4, ... up to `MAX_DELAY_S`); after `MAX_RESTARTS` restarts within `WINDOW_S`
it does not start that component again (a crash loop: its log says why), says so on the tape and leaves it to `yeto stack
up` (after which it watches it again).
Each restart is one ComponentRestarted event with the component, its new pid, its restarts within the window, how long
it was down as far as the watchdog saw, whether it gave up, and the last line of its log (240 characters at most).
`<state>/watchdog.json` keeps the same counts for `yeto stack status`.

What it leaves alone: a syncer shard of a head over several VMs (its lease and standby take over: infra/stack/standby.py
and services/syncer/lease.py), and the nats-server of a single-node head (its TLS and users belong to `yeto stack up
--head`; a head whose server died is a lost head: `yeto recover`). A local stack's nats-server is started again at its
port with its store (the components reconnect), a cluster's node rejoins (servers.restart_nodes).

`yeto stack down` takes the lock, stops every component (this one among the first) and removes the record: a watchdog
that saw a component stop waits for the lock, finds no record and exits, so a stop is never undone. Off with
`yeto stack up --no-watchdog` or `$YETO_WATCHDOG=0` (recorded: a restart of the stack keeps the choice).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path

from yeto.infra import procs
from yeto.infra.stack.components import WATCHDOG as NAME

POLL_S = 1.0
WINDOW_S = 600.0       # restarts counted over the last ten minutes
MAX_RESTARTS = int(os.environ.get("YETO_WATCHDOG_MAX_RESTARTS", "5"))   # within WINDOW_S; then it gives up on it
MAX_DELAY_S = 30.0
TAIL_CHARS = 240


def counts_path(root: Path) -> Path:
    return Path(root) / "watchdog.json"


def read_counts(root: Path) -> dict[str, dict]:
    """{component: {"restarts": n within the window, "last": epoch s, "gave_up": bool}} as the watchdog last wrote it."""
    try:
        counts = json.loads(counts_path(root).read_text())
    except (OSError, ValueError):
        return {}
    return counts if isinstance(counts, dict) else {}


def recent_lines(root: Path, now: float | None = None) -> list[str]:
    """What `yeto status` warns of: each component the watchdog started again within its window, or gave up on."""
    now = time.time() if now is None else now
    lines = []
    for name, count in sorted(read_counts(root).items()):
        last = float(count.get("last", 0))
        if count.get("gave_up"):
            lines.append(f"{name} died {count.get('restarts', 0)} times within {WINDOW_S / 60:g} minutes and the watchdog "
                         f"left it down: read {Path(root) / 'logs' / f'{name}.log'}, fix the cause, then `yeto stack up`")
        elif count.get("restarts") and now - last <= WINDOW_S:
            lines.append(f"the watchdog started {name} again {count['restarts']} time(s) within {WINDOW_S / 60:g} minutes "
                         f"(last at {time.strftime('%H:%M:%S', time.localtime(last))}; `yeto stack status`, its log "
                         f"{Path(root) / 'logs' / f'{name}.log'})")
    return lines


def delay(recent: int) -> float:
    """The wait before a component's next start, after `recent` restarts within the window."""
    return 0.0 if recent == 0 else min(MAX_DELAY_S, 2.0 ** (recent - 1))


class Crashes:
    """Each component's restarts within the last WINDOW_S."""

    def __init__(self) -> None:
        self.times: dict[str, deque[float]] = {}

    def recent(self, name: str, now: float) -> int:
        times = self.times.setdefault(name, deque())
        while times and times[0] < now - WINDOW_S:
            times.popleft()
        return len(times)

    def add(self, name: str, now: float) -> int:
        self.recent(name, now)
        self.times[name].append(now)
        return len(self.times[name])


def watched(rec: dict) -> list[str]:
    """The components of `rec` this watchdog starts again when they die (the module docstring: what it leaves alone)."""
    from yeto.infra.nats.cluster import node_names

    nodes = set(node_names(rec))
    head_single = bool(rec.get("ca_file")) and rec.get("cluster", 1) == 1
    out = []
    for name in rec.get("pids", {}):
        if name == NAME or (name in nodes and head_single) or (rec.get("peers") and name.startswith("syncer")):
            continue
        out.append(name)
    return out


def log_tail(path: Path) -> str:
    """The last non-empty line of a component's log, printable characters only, TAIL_CHARS at most."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    last = lines[-1] if lines else ""
    return "".join(c if c.isprintable() else "?" for c in last)[:TAIL_CHARS]


def restart(root: Path, names: list[str]) -> dict[str, int] | None:
    """Start again those of `names` that are still dead, under the record's lock: {name: its new pid, or 0 where its
    start failed here (a log that cannot be opened, no interpreter)}; a name another start (`stack up`) brought back
    meanwhile is left out. None when the stack is down (no record: `down` ran) or watched by another watchdog."""
    from yeto.infra import stack
    from yeto.infra.nats.cluster import node_names
    from yeto.infra.stack.components import alive_in
    from yeto.infra.stack.servers import restart_nodes

    paths = stack.StackPaths(Path(root))
    with stack.locked(paths):
        rec = stack.read_record(paths)
        if rec is None or not rec.get(NAME, False) or _replaced(rec):
            return None
        dead = [n for n in names if n in rec["pids"] and not alive_in(rec, n)]
        nodes = [n for n in dead if n in node_names(rec)]
        try:
            if nodes and not rec.get("ca_file") and rec.get("cluster", 1) == 1:
                # the local stack's one nats-server: `up`'s own start, at its port with its store; it keeps every
                # component that still runs and starts the dead ones
                new = stack._up(paths, port=0, head_run=None, hosts=None, syncers=None, cluster=None, node=None,
                                peers=None, before_components=None)
                return {n: new["pids"][n] if alive_in(new, n) else 0 for n in dead if n in new["pids"]}
            if nodes:
                restart_nodes(paths, rec)
        except Exception as e:  # noqa: BLE001 - a failed start counts as a crash (backoff, then giving up)
            print(f"watchdog: starting {', '.join(nodes)} again failed: {e}", flush=True)
        stack.start_dead(paths, rec, [n for n in dead if n not in nodes],
                         on_error=lambda name, e: print(f"watchdog: starting {name} again failed: {e}", flush=True))
        stack._write_record(paths, rec)
        return {n: rec["pids"][n] if alive_in(rec, n) else 0 for n in dead}


def _replaced(rec: dict) -> bool:
    """Another watchdog is the recorded one and runs (a `stack up` started one while this one was thought gone)."""
    from yeto.infra.stack.components import alive_in

    return rec["pids"].get(NAME) not in (None, os.getpid()) and alive_in(rec, NAME)


async def publish(url: str, events: list) -> None:
    from yeto.infra.bus import connect

    bus = await connect(url, name=NAME)
    try:
        for event in events:
            await bus.publish(event, retry_for=ANNOUNCE_S)
    finally:
        await bus.close()


ANNOUNCE_S = 60.0     # how long a restart's event may take to reach a bus that is away (its nats-server restarting)


def announce(url: str, events: list) -> None:
    """Put the restarts on the tape, on a thread of their own: the loop goes on watching while the bus is away (a
    nats-server killed beside the component, being started again). A bus that does not answer within ANNOUNCE_S costs
    the events, never a restart (a line says so)."""
    if events:
        threading.Thread(target=_announce, args=(url, events), name="watchdog-announce", daemon=True).start()


def _announce(url: str, events: list) -> None:
    deadline, wait = time.monotonic() + ANNOUNCE_S, 0.5
    while True:
        try:
            asyncio.run(asyncio.wait_for(publish(url, events), timeout=max(1.0, deadline - time.monotonic())))
            return
        except (Exception, asyncio.CancelledError) as e:  # noqa: BLE001 - the restart happened; only its event is late
            if time.monotonic() + wait >= deadline:
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                print(f"watchdog: {len(events)} ComponentRestarted event(s) not published: {why}", flush=True)
                return
        time.sleep(wait)           # the bus is away (its server restarting): ask again, an id de-duplicates a repeat
        wait = min(2 * wait, 5.0)


def write_counts(root: Path, counts: dict[str, dict]) -> None:
    tmp = counts_path(root).with_name(f".watchdog.json.{os.getpid()}")
    tmp.write_text(json.dumps(counts, indent=2, sort_keys=True))
    os.replace(tmp, counts_path(root))


def watch(root: Path, *, poll_s: float = POLL_S) -> int:
    """The watchdog's loop; returns 0 once the stack is down (its record gone) or it is no longer the recorded one."""
    from yeto.infra import stack
    from yeto.infra.stack.components import alive_in
    from yeto.schemas.events import ComponentRestarted

    paths = stack.StackPaths(Path(root))
    crashes, seen_dead, counts = Crashes(), {}, read_counts(root)
    host = socket.gethostname()
    print(f"watchdog of the stack under {root}: restarting components that die (at most {MAX_RESTARTS} in "
          f"{WINDOW_S:g} s each)", flush=True)
    while True:
        procs.reap_children()   # the components this watchdog started that ended (its children)
        rec = stack.read_record(paths)
        if rec is None:
            print("watchdog: the stack's record is gone (`yeto stack down`): exiting", flush=True)
            return 0
        if _replaced(rec):
            print(f"watchdog: another watchdog (pid {rec['pids'][NAME]}) watches this stack: exiting", flush=True)
            return 0
        now = time.time()
        dead = [n for n in watched(rec) if not alive_in(rec, n)]
        for name in list(seen_dead):
            if name not in dead:
                del seen_dead[name]         # started again (by `stack up`, or by this watchdog)
        due, given_up = [], []
        for name in dead:
            first = seen_dead.setdefault(name, now)
            if counts.get(name, {}).get("gave_up"):
                continue
            recent = crashes.recent(name, now)
            if recent >= MAX_RESTARTS:
                given_up.append(name)
            elif now - first >= delay(recent):
                due.append(name)
        if due or given_up:
            tails = {name: log_tail(paths.logs / f"{name}.log") for name in [*due, *given_up]}   # the dead one's words
            started = restart(root, due) if due else {}
            if started is None:
                print("watchdog: the stack is down or watched by another watchdog: exiting", flush=True)
                return 0
            events = []
            for name in [*(n for n in due if n in started), *given_up]:     # not: brought back meanwhile by `stack up`
                n = crashes.add(name, now) if name in started else crashes.recent(name, now)
                pid = started.get(name, 0)
                gave_up = name in given_up
                counts[name] = {"restarts": n, "last": now, "gave_up": gave_up}
                if gave_up:
                    print(f"watchdog: {name} died (its log's last line: {tails[name]!r}); not started again after {n} "
                          f"restart(s) in {WINDOW_S:g} s: read {paths.logs / f'{name}.log'}, fix the cause, then "
                          "`yeto stack up`", flush=True)
                else:
                    print(f"watchdog: {name} died (its log's last line: {tails[name]!r}); "
                          + (f"started again as pid {pid}" if pid else "its start failed (above)")
                          + f" ({n} restart(s) in {WINDOW_S:g} s)", flush=True)
                events.append(ComponentRestarted(component=name, pid=pid, restarts=n,
                                                 down_s=round(time.time() - seen_dead[name], 3), gave_up=gave_up,
                                                 log_tail=tails[name], host=host, source=NAME))
            for name in due:
                seen_dead.pop(name, None)   # its backoff counts from this start: dead again at once, it waits delay()
            write_counts(root, counts)
            announce((stack.read_record(paths) or rec)["url"], events)
            continue
        # components `stack up` restarted by hand: a count from before starts over once the component runs again
        if revived := [n for n in counts if counts[n].get("gave_up") and n in rec["pids"] and n not in dead]:
            for name in revived:
                counts[name]["gave_up"] = False
                crashes.times.pop(name, None)
            write_counts(root, counts)
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m yeto.infra.stack.watchdog", description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", required=True, type=Path)
    p.add_argument("--poll-s", type=float, default=POLL_S)
    args = p.parse_args(argv)
    while True:
        try:
            return watch(args.state_dir, poll_s=args.poll_s)
        except Exception:  # noqa: BLE001 - a watchdog that dies watches nothing: say why, and watch again
            traceback.print_exc()
            time.sleep(args.poll_s)


if __name__ == "__main__":
    sys.exit(main())
