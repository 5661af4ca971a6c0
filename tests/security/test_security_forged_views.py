"""A learner credential tries to forge what the operator sees (issue 41): from its own progress subject it publishes a
`RunStopped` of another run, a ghost run (its `RunLaunched` and fake progress), and progress claiming another island
of its run. Against a real nats-server with the stack's permissions, a real tape writer process and its DuckDB file,
`yeto status`, the views, spend and the dashboard show only what the subjects vouch for, and the forged events are
rows of `rejections`."""
from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from hostile_stack import ATTACKER, GHOST, SPEC, VICTIM, as_learner, progress, rows_when
from yeto.cli.dashboard.server import Feed
from yeto.cli.main import main
from yeto.infra.bus import connect
from yeto.infra.nats.server import ensure_streams
from yeto.infra.tape.sql import ask
from yeto.schemas.base import to_bytes
from yeto.schemas.final import RunFinalized, RunStopped
from yeto.schemas.fleet import IslandUp, RunLaunched
from yeto.schemas.subjects import learner_event_subject

pytestmark = pytest.mark.timeout(120)


def test_a_learner_cannot_stop_another_run_invent_a_run_or_speak_for_another_island(live_stack, capsys):
    srv, state, writer = live_stack

    async def attack() -> list:
        bus = await connect(srv.url, name="operator")
        await ensure_streams(bus)
        await bus.publish(RunLaunched(run_id=VICTIM, fleet=[SPEC, SPEC], recipe={"train": {"max_steps": 100}}))
        for island in (0, 1):
            await bus.publish(IslandUp(run_id=VICTIM, island=island, spec=SPEC, price_per_hour=1.0))
        mine = learner_event_subject(ATTACKER, "LearnerProgress", "island-0")
        first, second = (learner_event_subject(VICTIM, "LearnerProgress", f"island-{i}") for i in (0, 1))
        await as_learner(srv.url, state, VICTIM, "island-0", [(first, to_bytes(progress(VICTIM, "island-0", 10)))])
        await as_learner(srv.url, state, ATTACKER, "island-0", [
            (mine, to_bytes(RunStopped(run_id=VICTIM, reason="forged by another run's island"))),
            (mine, to_bytes(RunLaunched(run_id=GHOST, fleet=[SPEC], recipe={}))),
            (mine, to_bytes(progress(GHOST, "island-0", 99_999, loss=0.001, tokens=10**12))),
            (mine, to_bytes(progress(ATTACKER, "island-0", 5)))])                       # its own progress: genuine
        await as_learner(srv.url, state, VICTIM, "island-1", [     # its own subject, island 0's name, a finished run
            (second, to_bytes(progress(VICTIM, "island-0", 10**6, loss=0.0))),
            (second, to_bytes(RunFinalized(run_id=VICTIM, output="x", manifest_sha256="0" * 64, reason="user", spend_usd=0.0)))])
        await bus.publish(RunFinalized(run_id=VICTIM, output="out", manifest_sha256="1" * 64, reason="max_steps",
                                       spend_usd=1.0))
        try:
            await rows_when(bus, "SELECT seq FROM events", 11)
            return (await ask(bus, "SELECT run_id, type, reason, consumer FROM rejections ORDER BY seq"))["rows"]
        finally:
            await bus.close()

    rejected = asyncio.run(attack())
    assert [(run, kind, consumer) for run, kind, _, consumer in rejected] == [
        (ATTACKER, "LearnerProgress", "tape")] * 3 + [(VICTIM, "LearnerProgress", "tape")] * 2
    assert "names run r-victim on a subject of run r-attack" in rejected[0][2]
    assert "names learner island-0 on the subject of island-1" in rejected[3][2]

    assert main(["--nats-url", srv.url, "status", "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert GHOST not in runs, "no ghost run"
    assert runs[VICTIM]["phase"] == "finalized" and runs[VICTIM]["step"] == 10 and runs[VICTIM]["loss"] == 2.5
    assert main(["--nats-url", srv.url, "status", VICTIM, "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert (view["phase"], view["ended"], view["reason"]) == ("finalized", "RunFinalized", "max_steps")
    assert {name: lr["step"] for name, lr in view["learners"].items()} == {"island-0": 10}
    assert main(["--nats-url", srv.url, "sql", "--format", "json", "select run_id, learner, step from learner_progress"]) == 0
    assert sorted(tuple(r.values()) for r in json.loads(capsys.readouterr().out)) == [(ATTACKER, "island-0", 5),
                                                                                      (VICTIM, "island-0", 10)]
    board = Feed(SimpleNamespace(state_dir=None, nats_url=srv.url)).run(VICTIM)
    assert board is not None and board["phase"] == "finalized" and [lr["step"] for lr in board["learners"]] == [10]
    assert Feed(SimpleNamespace(state_dir=None, nats_url=srv.url)).run(GHOST) is None
