"""A TCP forwarder: `python lib_wan_proxy.py TARGET_HOST:PORT LISTEN_HOST:PORT...` (run as its own process).

The stack's nats-server binds loopback only (a non-loopback bind needs TLS and credentials); the
forwarder exposes it on the hub end of each shaped link, so learners in their namespaces reach it
through the link while the services keep talking to it over loopback.
"""
from __future__ import annotations

import asyncio
import sys

TOTALS = {"up": 0, "down": 0}
"""Application bytes forwarded, learners -> server ("up") and back: compared with the link counters,
the difference is TCP/IP overhead."""


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: str) -> None:
    try:
        while chunk := await reader.read(1 << 16):
            TOTALS[way] += len(chunk)
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main(target: str, listens: list[str]) -> None:
    host, port = target.rsplit(":", 1)

    async def handle(reader, writer):
        try:
            up_r, up_w = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_w, "up"), pipe(up_r, writer, "down"))

    servers = []
    for spec in listens:
        lhost, lport = spec.rsplit(":", 1)
        servers.append(await asyncio.start_server(handle, lhost, int(lport)))
    for server in servers:
        await server.start_serving()
    print("listening", flush=True)
    loop = asyncio.get_running_loop()
    # `totals` on stdin answers with the counts so far (the parent asks before and after each run)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        if line.strip() == b"totals":
            print(f"{TOTALS['up']} {TOTALS['down']}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
