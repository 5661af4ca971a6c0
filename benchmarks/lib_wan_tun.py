"""A user-space link emulator for benchmarks/wan.py: rate and one-way delay between two TUN devices.

netem is not in this kernel (nor fq, which could honour departure times), so a link with latency is
two TUN devices and this process between them: `python lib_wan_tun.py HUB_IF NS_IF RATE DELAY_MS`
creates both devices in the current (hub) namespace, prints `ready`, and forwards IP packets both ways.
The caller moves NS_IF into the learner's namespace (the open descriptor follows the device). Each
direction is what netem + tbf would be: a FIFO serialised at RATE (a packet departs when the previous
one has left, len*8/RATE later), delivered DELAY_MS after it departs, tail-dropped when the backlog
waiting to depart exceeds BACKLOG_S (tbf's `latency 50ms` in the veth links). It runs until killed.
"""
from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import sys

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
BACKLOG_S = 0.05


def parse_rate(rate: str) -> float:
    """'20mbit' -> 20e6 bits/s (tc's units: kbit, mbit, gbit, or plain bits/s)."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for suffix, scale in units.items():
        if rate.lower().endswith(suffix):
            return float(rate[:-len(suffix)]) * scale
    return float(rate)


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class Direction:
    """Packets read from `src`, serialised at `rate_bps`, written to `dst` `delay_s` after departing."""

    def __init__(self, loop: asyncio.AbstractEventLoop, src: int, dst: int, rate_bps: float, delay_s: float) -> None:
        self.loop, self.src, self.dst, self.rate, self.delay = loop, src, dst, rate_bps, delay_s
        self.free_at = 0.0
        self.dropped = 0
        loop.add_reader(src, self.readable)

    def readable(self) -> None:
        while True:
            try:
                packet = os.read(self.src, 65535)
            except BlockingIOError:
                return
            now = self.loop.time()
            start = max(now, self.free_at)
            if start - now > BACKLOG_S:
                self.dropped += 1
                continue
            self.free_at = start + len(packet) * 8 / self.rate
            self.loop.call_at(self.free_at + self.delay, self.deliver, packet)

    def deliver(self, packet: bytes) -> None:
        try:
            os.write(self.dst, packet)
        except (BlockingIOError, OSError):
            self.dropped += 1        # the far device is down or full: a lost packet, as on a real link


async def main(hub_if: str, ns_if: str, rate: str, delay_ms: str) -> None:
    loop = asyncio.get_running_loop()
    hub, far = open_tun(hub_if), open_tun(ns_if)
    bps, delay = parse_rate(rate), float(delay_ms) / 1e3
    Direction(loop, hub, far, bps, delay)      # hub -> learner
    Direction(loop, far, hub, bps, delay)      # learner -> hub
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
