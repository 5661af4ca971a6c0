"""What a learner's credential can do from an island's namespace (run there by test_cloud_perms.py as the run of an
island-shaped task): `attacks` tries what its credential must not do, then its own push; `connect` is a learner's
plain connect (yeto's bus) with the task's env. One JSON line on stdout says what the server answered."""
from __future__ import annotations

import asyncio
import json
import os
import ssl
import sys
from pathlib import Path

import nats

sys.path.insert(0, str(Path(__file__).parents[1] / "security"))
from test_security_bus import _violation  # the loopback tests' reading of the server's -ERR


def env_path(name: str) -> str:
    return os.path.expanduser(os.environ[name])


async def attacks(run: str, other: str) -> dict:
    ident = json.loads(Path(env_path("YETO_NATS_CREDS")).read_text())
    tls = ssl.create_default_context(cafile=env_path("YETO_NATS_CA"))
    tls.check_hostname = False          # the pinned certificate is the identity (as infra/bus/nats_bus.py does)
    errors: list[str] = []
    got = asyncio.Event()

    async def on_error(e: Exception) -> None:
        errors.append(str(e))
        got.set()
    nc = await nats.connect(os.environ["YETO_NATS_URL"], user=ident["user"], password=ident["password"], tls=tls,
                            inbox_prefix=ident["inbox_prefix"], error_cb=on_error, allow_reconnect=False)
    out: dict = {}
    try:
        launch, forged = "yeto.cmd.launcher.LaunchRun", f"yeto.frag.{run}.0.island-1"
        await nc.publish(launch, b'{"run_id": "evil"}')
        await nc.flush()
        out["launch"] = await _violation(errors, got, launch)
        await nc.subscribe(f"yeto.glob.{other}.>")
        await nc.flush()
        out["other_run"] = await _violation(errors, got, f"yeto.glob.{other}.>")
        await nc.publish(forged, b"chunk")
        await nc.flush()
        out["other_island"] = await _violation(errors, got, forged)
        ack = await nc.jetstream(timeout=10).publish(f"yeto.frag.{run}.0.island-0", b"own chunk")   # its own still lands
        out["own_push"] = {"stream": ack.stream, "seq": ack.seq, "connected": nc.is_connected}
    finally:
        await nc.close()
    return out


async def plain_connect() -> dict:
    from yeto.infra.bus import connect

    for name in ("YETO_NATS_CREDS", "YETO_NATS_CA"):
        if name in os.environ:
            os.environ[name] = env_path(name)
    try:
        bus = await connect(os.environ["YETO_NATS_URL"], name="probe", connect_timeout=5)
    except ConnectionError as e:
        return {"connected": False, "error": str(e)}
    await bus.close()
    return {"connected": True, "error": ""}


if __name__ == "__main__":
    mode = sys.argv[1]
    result = asyncio.run(attacks(sys.argv[2], sys.argv[3]) if mode == "attacks" else plain_connect())
    print(json.dumps(result), flush=True)
