"""A TCP forwarder: `python lib_wan_proxy.py TARGET_HOST:PORT LISTEN_HOST:PORT...` (run as its own process).

The stack's nats-server binds loopback only (a non-loopback bind needs TLS and credentials); the
forwarder exposes it on the hub end of each shaped link, so learners in their namespaces reach it
through the link while the services keep talking to it over loopback.
"""
from __future__ import annotations

import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(1 << 16):
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
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    servers = []
    for spec in listens:
        lhost, lport = spec.rsplit(":", 1)
        servers.append(await asyncio.start_server(handle, lhost, int(lport)))
    print("listening", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
