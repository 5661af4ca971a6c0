"""Slow links for benchmarks/wan.py: one network namespace per learner, a tbf-shaped veth pair to the hub.

The hub is the root namespace (nats-server, the services, torchft's lighthouse). Learner i lives in
namespace `yeto-wan-<pid>-<i>` at 10.231.<i>.2, its hub side at 10.231.<i>.1; learners reach each other
through the hub (ip_forward), so every byte between islands crosses the shaped links, as in a star WAN.
netem is not in this kernel: without delay, a veth pair with tbf (rate only) on both ends; with
`delay_ms`, a pair of TUN devices joined by lib_wan_tun.py (rate and one-way delay in user space, one
process per link). Everything is removed by name.
No name server is reachable from a namespace (the host's resolv.conf names one the star does not route to), so a
lookup there waited out the resolver's timeouts: c10d's reverse lookup of each peer (DDP's and torchft's rendezvous)
took 10 s (2 x 5 s) at every start, time a real WAN's resolver answers at once. Each namespace gets its own
resolv.conf (/etc/netns/<ns>/, which `ip netns exec` mounts over /etc/resolv.conf) naming its own loopback, where no
server listens: a lookup fails at once, as a resolver's "no such name" would.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

NETNS_ETC = Path("/etc/netns")
"""`ip netns exec NS` bind-mounts NETNS_ETC/NS/<file> over /etc/<file> for its command."""


def sh(*argv: str, check: bool = True) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr.strip()}")
    return out.stdout


def available() -> str | None:
    """None when namespaces and tbf can be used here; otherwise why not (the dry-run/test skip reason)."""
    import os
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    probe = f"yeto-wan-probe-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
        return "ip netns add is not permitted here"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Link:
    """One learner's namespace and its veth pair."""

    ns: str
    hub_if: str
    ns_if: str
    hub_ip: str
    ns_ip: str

    def counters(self) -> tuple[int, int]:
        """(bytes learner->hub, bytes hub->learner), read on the hub end of the pair."""
        base = Path("/sys/class/net") / self.hub_if / "statistics"
        return int((base / "rx_bytes").read_text()), int((base / "tx_bytes").read_text())

    def prefix(self) -> list[str]:
        """argv prefix that runs a command inside this learner's namespace."""
        return ["ip", "netns", "exec", self.ns]


@dataclass
class Wan:
    """The star of shaped links; `up` builds it, `down` removes exactly what `up` made."""

    learners: int
    rate: str = "20mbit"
    delay_ms: float = 0.0
    tag: str = ""
    net: int = 231                      # learner i's /24 is 10.<net>.<i>.0
    links: list[Link] = field(default_factory=list)
    _forward: str | None = None
    _emulators: list = field(default_factory=list)

    def up(self) -> Wan:
        import os
        tag = self.tag or str(os.getpid() % 100000)
        fwd = Path("/proc/sys/net/ipv4/ip_forward")
        self._forward = fwd.read_text().strip()
        fwd.write_text("1")
        for i in range(self.learners):
            link = Link(ns=f"yeto-wan-{tag}-{i}", hub_if=f"ywh{tag}{i}"[:15], ns_if=f"ywl{tag}{i}"[:15],
                        hub_ip=f"10.{self.net}.{i}.1", ns_ip=f"10.{self.net}.{i}.2")
            self.links.append(link)
            sh("ip", "netns", "add", link.ns)
            resolver = NETNS_ETC / link.ns
            resolver.mkdir(parents=True, exist_ok=True)
            (resolver / "resolv.conf").write_text("nameserver 127.0.0.1\n")   # nothing listens: fails at once
            if self.delay_ms > 0:
                self._emulate(link)
            else:
                sh("ip", "link", "add", link.hub_if, "type", "veth", "peer", "name", link.ns_if)
            sh("ip", "link", "set", link.ns_if, "netns", link.ns)
            sh("ip", "addr", "add", f"{link.hub_ip}/24", "dev", link.hub_if)
            sh("ip", "link", "set", link.hub_if, "up")
            inside = link.prefix()
            sh(*inside, "ip", "addr", "add", f"{link.ns_ip}/24", "dev", link.ns_if)
            sh(*inside, "ip", "link", "set", link.ns_if, "up")
            sh(*inside, "ip", "link", "set", "lo", "up")
            sh(*inside, "ip", "route", "add", "default", "via", link.hub_ip)
            for dev, pre in ((link.hub_if, []), (link.ns_if, inside)):
                if self.delay_ms <= 0:
                    sh(*pre, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate, "burst", "32kbit",
                       "latency", "50ms")
        return self

    def _emulate(self, link: Link) -> None:
        """Both TUN devices, created by the emulator process in the hub namespace (it holds them open)."""
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("lib_wan_tun.py")), link.hub_if,
                                 link.ns_if, self.rate, str(self.delay_ms)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._emulators.append(proc)
        line = proc.stdout.readline().strip()
        if line != b"ready":
            raise RuntimeError(f"the link emulator for {link.ns} did not start: {line.decode(errors='replace')}")

    def down(self) -> None:
        for proc in self._emulators:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self._emulators = []
        for link in self.links:
            sh("ip", "link", "del", link.hub_if, check=False)       # removes both ends of the pair
            sh("ip", "netns", "del", link.ns, check=False)
            shutil.rmtree(NETNS_ETC / link.ns, ignore_errors=True)
        self.links = []
        if self._forward is not None:
            Path("/proc/sys/net/ipv4/ip_forward").write_text(self._forward)
            self._forward = None

    def bytes(self) -> tuple[int, int]:
        """Bytes on every learner link so far: (learners -> hub, hub -> learners)."""
        pairs = [link.counters() for link in self.links]
        return sum(up for up, _ in pairs), sum(down for _, down in pairs)


def since(wan: Wan, before: tuple[int, int]) -> tuple[int, int]:
    up, down = wan.bytes()
    return up - before[0], down - before[1]
