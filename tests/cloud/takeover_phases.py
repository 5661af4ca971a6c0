"""The phases after a head node's loss, read from the surviving nodes' logs: each Raft group's new leader and
JetStream's meta leader (the nats-servers' own lines, and which node led the meta group at the kill) and the syncers'
steps (the lease seen lapsed and taken, the shard's consumer kept and opened, kernels ready, each learner's first push
received, the fragments restored, pushes delivered again while held, keep-alives held up). The rehearsals print them
beside the tape's first merged global, so every run measures where the time after the kill goes (docs/CLUSTER.md)."""
from __future__ import annotations

import re
import time
from pathlib import Path

NATS_LINE = re.compile(r"^\[\d+\] (\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) \[INF\] JetStream cluster new "
                       r"(stream|consumer) leader for '\$G > ([^']+)'")
META_LINE = re.compile(r"^\[\d+\] (\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) \[INF\] (?:JetStream cluster new metadata "
                       r"leader: ([^/\s]+)/|(Self) is new JetStream cluster metadata leader)")
SERVICE_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \S+ INFO (.*)$")
LAPSE = re.compile(r"holds the lease .*unchanged ([\d.]+)s before")
SYNCER_STEPS = (re.compile(r"holds the lease"), re.compile(r"took the shard over"),
                re.compile(r"syncer \S+: merging$"), re.compile(r"kernels for codecs .* ready"),
                re.compile(r"first push of \S+ received"), re.compile(r"resumed \d+ fragments"),
                re.compile(r"fetched fragments"), re.compile(r"delivered again while held"),
                re.compile(r"kept alive [\d.]+s after"), re.compile(r"consumer \S+: ack wait"))
# the groups on a syncer's path; the others (the commands' stream, the islands' watches) are left out
GROUPS = ("YETO_EVT", "YETO_FRAG", "YETO_GKEY", "YETO_GDELTA", "YETO_LEASE", "YETO_FSNAP", "YETO_FRAG > syncer",
          "YETO_EVT > tape", "YETO_EVT > tape-1")


def _local(text: str, fmt: str) -> float:
    return time.mktime(time.strptime(text, fmt))


def node_phases(logs: Path, killed_at: float) -> list[tuple[float, str]]:
    """(seconds after the kill, what) from one node's log folder: each group's first new leader after the kill and
    each syncer step."""
    found: list[tuple[float, str]] = []
    for path in sorted(logs.glob("*.log")):
        lines = path.read_text(errors="replace").splitlines()
        if path.name.startswith("nats-server"):
            for at, leader in meta_leaders(path, killed_at):
                if at > 0:
                    found.append((at, f"JetStream's meta group: new leader {leader} ({path.stem})"))
            for line in lines:
                if (m := NATS_LINE.match(line)) and m[3] in GROUPS:
                    stamp, frac = m[1].split(".")
                    at = _local(stamp, "%Y/%m/%d %H:%M:%S") + float(f"0.{frac}") - killed_at
                    if at > 0:
                        found.append((at, f"{m[3]}: new {m[2]} leader ({path.stem})"))
        elif path.name.startswith("syncer"):
            for line in lines:
                if (m := SERVICE_LINE.match(line)) and any(step.search(m[3]) for step in SYNCER_STEPS):
                    at = _local(m[1], "%Y-%m-%d %H:%M:%S") + int(m[2]) / 1000 - killed_at
                    if at > 0:
                        found.append((at, f"{path.stem}: {m[3][:110]}"))
                        if lapse := LAPSE.search(m[3]):
                            found.append((at - float(lapse[1]), f"{path.stem}: the lease's last renewal it saw"))
    return found


def meta_leaders(path: Path, killed_at: float) -> list[tuple[float, str]]:
    """(seconds after the kill, the node) of each meta leader one nats-server's log names."""
    found = []
    for m in filter(None, map(META_LINE.match, path.read_text(errors="replace").splitlines())):
        stamp, frac = m[1].split(".")
        at = _local(stamp, "%Y/%m/%d %H:%M:%S") + float(f"0.{frac}") - killed_at
        found.append((at, m[2] or f"yeto-{path.stem.rsplit('-', 1)[1]}"))
    return found


def meta_at_kill(node_dirs: list[Path], killed_at: float) -> str:
    """The node that led JetStream's meta group at the kill, by the surviving nats-servers' last word before it."""
    said = [f for d in node_dirs for p in (d / "home/.yeto/head/logs").glob("nats-server*.log")
            for f in meta_leaders(p, killed_at) if f[0] <= 0]
    return max(said)[1] if said else "not known"


def phases(node_dirs: list[Path], killed_at: float) -> list[tuple[float, str]]:
    """Every surviving node's phases, in time order; a stream's leader and the meta group's counted once (the first
    node to say it; a consumer's may change again)."""
    seen, out = set(), []
    for at, what in sorted(p for d in node_dirs for p in node_phases(d / "home/.yeto/head/logs", killed_at)):
        key = what.split(" (")[0] if "stream leader" in what or "meta group" in what else (at, what)
        if key not in seen:
            seen.add(key)
            out.append((at, what))
    return out


def report(node_dirs: list[Path], killed_at: float, tape: list[tuple[float, str]]) -> str:
    """The phases and the tape's (seconds after the kill, what) as one block, one line each."""
    rows = sorted(phases(node_dirs, killed_at) + tape)
    return (f"JetStream's meta leader at the kill: {meta_at_kill(node_dirs, killed_at)}\nphases after the kill:\n"
            + "\n".join(f"  {at:+6.1f}s  {what}" for at, what in rows))


HELD_AGAIN = re.compile(r"(\d+) messages delivered again while held")
KEPT_LATE = re.compile(r"held messages kept alive ([\d.]+)s after the last time")


def held_report(node_dirs: list[Path]) -> str:
    """Over every surviving syncer's whole log: the messages delivered again while their holder held them (each counts
    towards the consumer's max_deliver) and the longest gap between two keep-alives (held.py logs each new longest
    over 2 s)."""
    again, late, logs = 0, [], sorted(p for d in node_dirs for p in (d / "home/.yeto/head/logs").glob("syncer*.log"))
    for path in logs:
        text = path.read_text(errors="replace")
        again += sum(int(n) for n in HELD_AGAIN.findall(text))
        late += [float(x) for x in KEPT_LATE.findall(text)]
    return (f"held pushes in {len(logs)} surviving syncers' logs, the whole run: {again} delivered again while held; "
            + (f"the longest gap between two keep-alives {max(late):.1f}s" if late else "no gap between keep-alives over 2 s"))
