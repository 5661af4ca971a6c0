"""The rehearsal's network: a bridge in this machine's namespace and, per head cluster or island job, a fresh
network namespace joined to it by a veth pair (lo up), all named after one world tag and removed by name.

World `tag`: bridge `yrb<tag>` at 10.<net>.1, namespace `yreh-<tag>-<what>` at 10.<net>.<index + 1> (the first,
the head, at .2), host end of its pair `yrh<tag><index>`. The island jobs are created by the head's launcher, a
process inside the head's namespace: so every host-side command goes through `ip -n yreh-<tag>-root`, a name for
this machine's own namespace (`ip netns attach`), and jobs run under `nsenter --net` rather than `ip netns exec`
(which gives its command a private mount namespace, where a namespace the head then creates is invisible).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

NETNS_DIR = Path("/run/netns")


def sh(*argv: str, check: bool = True) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr.strip()}")
    return out.stdout


def available() -> str | None:
    """None when namespaces, veth pairs and a bridge can be made here; otherwise why not (the skip reason)."""
    if os.geteuid() != 0:
        return "the rehearsal needs root (ip netns add, a bridge)"
    if not (shutil.which("ip") and shutil.which("nsenter")):
        return "the rehearsal needs iproute2 (ip) and util-linux (nsenter)"
    probe = f"yrbprobe{os.getpid() % 100000}"
    if subprocess.run(["ip", "link", "add", probe, "type", "bridge"], capture_output=True).returncode != 0:
        return "creating a bridge is not permitted here"
    subprocess.run(["ip", "link", "del", probe], capture_output=True)
    if subprocess.run(["ip", "netns", "add", f"yreh-{probe}"], capture_output=True).returncode != 0:
        return "ip netns add is not permitted here"
    subprocess.run(["ip", "netns", "del", f"yreh-{probe}"], capture_output=True)
    return None


def free_net(base: str = "10.236") -> str:
    """`<base>.K` for the first K no address of this machine uses."""
    used = sh("ip", "-4", "-o", "addr")
    return next(f"{base}.{k}" for k in range(256) if f" {base}.{k}." not in used)


# Name prefixes of a world's namespaces, bridge and host-side veths, and its address block: a rehearsal of its own
# kind uses its own (the head cluster's: HEAD_CLUSTER_NAMES), so two rehearsals on this machine never share a name.
NAMES = {"ns": "yreh", "bridge": "yrb", "veth": "yrh", "base": "10.236"}
HEAD_CLUSTER_NAMES = {"ns": "yhcn", "bridge": "yhcb", "veth": "yhcv", "base": "10.237"}
SYNCER_VM_NAMES = {"ns": "ysyn", "bridge": "ysyb", "veth": "ysyv", "base": "10.238"}


def world_names(tag: str, names: dict = NAMES) -> dict:
    """The world's names and its /24 (nothing made yet: recorded first, so `world_down` finds a half-made world)."""
    return {"tag": tag, "net": free_net(names["base"]), "bridge": f"{names['bridge']}{tag}",
            "root": f"{names['ns']}-{tag}-root", "ns_prefix": names["ns"], "veth_prefix": names["veth"]}


def _ns_prefix(world: dict) -> str:
    return f"{world.get('ns_prefix', NAMES['ns'])}-{world['tag']}"


def _veth(world: dict, index: int | str = "") -> str:
    return f"{world.get('veth_prefix', NAMES['veth'])}{world['tag']}{index}"


def world_up(world: dict) -> None:
    """The handle on this machine's namespace and the bridge."""
    sh("ip", "netns", "attach", world["root"], str(os.getpid()))
    sh("ip", "link", "add", world["bridge"], "type", "bridge")
    sh("ip", "addr", "add", f"{world['net']}.1/24", "dev", world["bridge"])
    sh("ip", "link", "set", world["bridge"], "up")


def ns_up(world: dict, what: str, index: int) -> tuple[str, str]:
    """A namespace for `what` with its veth pair on the bridge; (its name, its address)."""
    assert 1 <= index < 250, "a world holds up to 249 namespaces"
    ns, host_if, ip = f"{_ns_prefix(world)}-{what}", _veth(world, index), f"{world['net']}.{index + 1}"
    root = ("ip", "-n", world["root"])
    sh("ip", "netns", "add", ns)
    sh(*root, "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
    sh(*root, "link", "set", host_if, "master", world["bridge"], "up")
    sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
    sh("ip", "-n", ns, "link", "set", "eth0", "up")
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    return ns, ip


def enter(ns: str) -> list[str]:
    """argv prefix running a command in the namespace (network only: the file system stays this machine's)."""
    return ["nsenter", f"--net={NETNS_DIR / ns}"]


def pids(ns: str) -> list[int]:
    """Every process whose network namespace is `ns`: only what the rehearsal started there."""
    return [int(p) for p in sh("ip", "netns", "pids", ns, check=False).split()]


def _is_server(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "nats-server"
    except OSError:         # gone already
        return False


def kill_all(*spaces: str, grace_s: float = 5.0) -> None:
    """SIGTERM, then after `grace_s` SIGKILL, everything in the namespaces, all of them at once (one grace for all: a
    learner's process may sit out the whole grace, and a world's islands and head nodes went one after the other,
    5 s each); returns once none is left. The nats-servers are asked last, once the rest is gone (or its grace is
    out), as `yeto stack down` stops a stack: a tape writer stopped beside its server waited out its whole drain for
    it (infra/tape/writer.py, 5 s), and the head's supervisor with it. What outlives its SIGTERM's grace is killed."""
    left = [ns for ns in spaces if (NETNS_DIR / ns).exists()]
    for sig, wait_s, which in ((signal.SIGTERM, grace_s, lambda pid: not _is_server(pid)),
                               (signal.SIGTERM, grace_s, _is_server), (signal.SIGKILL, 10.0, lambda pid: True)):
        asked = [(ns, pid) for ns in left for pid in pids(ns) if which(pid)]
        for _, pid in asked:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            now = {ns: set(pids(ns)) for ns in {ns for ns, _ in asked}}
            if not (asked := [(ns, pid) for ns, pid in asked if pid in now[ns]]):
                break
            time.sleep(0.05)     # a process needs a moment to exit; this loop waits for its going, bounded
        if not (left := [ns for ns in left if pids(ns)]):
            return


def ns_down(world: dict, ns: str, index: int) -> None:
    if (NETNS_DIR / ns).exists():
        kill_all(ns)
    sh("ip", "-n", world["root"], "link", "del", _veth(world, index), check=False)
    sh("ip", "netns", "del", ns, check=False)


# The test is over when its world comes down: what a process does on its way out is no longer looked at (a head's
# service that has written an artifact took 3 s to exit after SIGTERM, 2026-12-06), so its grace is short.
TEARDOWN_GRACE_S = 1.0


def world_down(world: dict) -> None:
    """Everything of the world, found by name: its namespaces (processes first, TEARDOWN_GRACE_S after their SIGTERM),
    veths, the bridge, the handle."""
    spaces = [path.name for path in sorted(NETNS_DIR.glob(f"{_ns_prefix(world)}-*")) if path.name != world["root"]]
    kill_all(*spaces, grace_s=TEARDOWN_GRACE_S)
    for ns in spaces:
        sh("ip", "netns", "del", ns, check=False)
    for line in sh("ip", "-o", "link", "show", check=False).splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(_veth(world)) or name == world["bridge"]:
            sh("ip", "link", "del", name, check=False)
    sh("ip", "netns", "del", world["root"], check=False)
