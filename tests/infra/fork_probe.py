"""A stack component for tests/infra/test_infra_fork_tls.py: `python -m tests.infra.fork_probe STATE URL OUT`, forked
like the services. At once, as the launcher does with a run already waiting on the bus (services/launcher/backends/
skypilot.py): it reads the stack's record, issues a learner's credential and connects with it to URL (its command
line's, as the launcher's --nats-url) over TLS, pinning the record's certificate (none: the system's CAs). It writes
what it saw to OUT (JSON). It imports only what the fork server has imported already, so that it acts as soon as a
forked service would."""
from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from yeto.infra import stack
from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus.nats_bus import NatsBus

RUN = "r-forktls"


async def _connect_as_learner(url: str, creds: Path, ca: str) -> None:
    os.environ.update({bus_auth.CREDS_ENV: str(creds), "YETO_NATS_CA": ca})
    bus = await NatsBus.connect(url, name="probe", connect_timeout=30)
    await bus.close()


def main(state: Path, url: str, out: Path) -> None:
    rec = stack.read_record(stack.StackPaths(state)) or {}
    seen = {"comm": Path("/proc/self/comm").read_text().strip(), "record": bool(rec), "ca_file": rec.get("ca_file"),
            "servers": sorted(n for n in rec.get("pids", {}) if n.startswith("nats-server"))}
    try:
        creds = bus_auth.issue_learner(state, RUN, "island-0")
        if creds is None:
            raise RuntimeError("no credential issued: a head's stack issues them")
        asyncio.run(_connect_as_learner(url, creds, rec.get("ca_file") or ""))
        seen["connected"] = "yes"
    except Exception as e:  # noqa: BLE001 - what the learner would have seen, for the test's message
        seen["connected"] = f"{type(e).__name__}: {e}"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(seen))
    tmp.replace(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
