"""What the re-planning tests share: a planner that finds no cloud account (it plans on a copy of the fixture
catalog), the launcher and the planner as services, the run's events as the bus delivers them, and `yeto status RUN`
over a real tape file of them."""
from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path
from types import SimpleNamespace

from yeto.cli.main import main
from yeto.infra.runner import run_service
from yeto.infra.stack import StackPaths
from yeto.infra.tape.store import TapeStore
from yeto.schemas.base import parse, to_bytes
from yeto.schemas.subjects import run_events
from yeto.services.launcher import wiring as launcher_wiring
from yeto.services.launcher.effects import Effects
from yeto.services.planner import wiring as planner_wiring
from yeto.services.planner.catalog import FIXTURE_DIR


def no_cloud_credentials(tmp_path: Path, monkeypatch) -> None:
    """The planner's live signals find no account: it plans on the catalog (a copy of the fixture's)."""
    shutil.copytree(FIXTURE_DIR, tmp_path / "catalog")
    monkeypatch.setenv("YETO_CATALOG_DIR", str(tmp_path / "catalog"))
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "RUNPOD_API_KEY", "LAMBDA_API_KEY"):
        monkeypatch.delenv(k, raising=False)
    for k in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.setenv(k, str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


class Collected:
    """The run's events in the order the bus delivered them; `changed` is set on each."""

    def __init__(self) -> None:
        self.events: list = []
        self.changed = asyncio.Event()

    async def watch(self, bus, run_id: str):
        async def collect(d) -> None:
            self.events.append(parse(d.data))
            self.changed.set()
        return await bus.watch(run_events(run_id), collect)

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.type == kind]


@contextlib.asynccontextmanager
async def launcher_and_planner(url: str, cloud, state_dir: Path):
    """The launcher (its SkyPilot backend being `cloud`) and the planner as services on `url`, stopped on leaving."""
    stop = asyncio.Event()
    launcher = launcher_wiring.spec(Effects({"skypilot": cloud}, url, poll_s=0.2), tick_s=0.5)
    planner = planner_wiring.build(SimpleNamespace(settings=SimpleNamespace(state_dir=state_dir)), tick_s=0.5)
    tasks = [asyncio.create_task(run_service(s, url, instance=n, stop=stop))
             for s, n in ((launcher, "launcher"), (planner, "planner"))]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


def status_of(state: Path, run: str, events: list, capsys) -> str:
    """`yeto status RUN` over a real tape file holding `events` as the tape writer stores them."""
    store = TapeStore(StackPaths(state).db)
    store.append(list(range(1, len(events) + 1)), [e.run_id for e in events], [to_bytes(e).decode() for e in events])
    store.close()
    capsys.readouterr()
    assert main(["--state-dir", str(state), "status", run]) == 0
    return capsys.readouterr().out
