"""Run ids off the pattern are refused everywhere one enters: the schema (so the runner rejects the message), every
CLI argument that takes one, the head's stack, and every path built from one (which must stay in the state dir)."""
from __future__ import annotations

import asyncio
import json
from typing import ClassVar, Literal

import pytest
from pydantic import ValidationError

from yeto.cli.main import main
from yeto.infra.bus import connect
from yeto.infra.run_paths import run_path
from yeto.infra.runner import Publish, ServiceSpec, run_service
from yeto.infra.stack import StackPaths, head_server
from yeto.schemas import SchemaError, parse
from yeto.schemas.base import RUN_ID_PATTERN, SYSTEM_RUN, Command, Event, check_run_id, registry
from yeto.schemas.commands import StopRun
from yeto.schemas.subjects import command_subject, event_subject, run_events

pytestmark = pytest.mark.timeout(120)

BAD = ["../../x", "/abs", "a.b", "", "a" * 64, "rün", "R1", "r1\n", "a b", "a*", ">", "-x", "_x"]
GOOD = ["r", "r-20260101-120000-ab12", "0", "a" * 63, "accept-lora"]


@pytest.mark.parametrize("bad", BAD)
def test_the_schema_refuses_a_bad_run_id_as_a_schema_error(bad):
    with pytest.raises(SchemaError, match="run_id"):
        parse({"type": "StopRun", "version": 1, "run_id": bad, "source": "cli"})
    with pytest.raises(ValidationError, match="not a run id"):
        StopRun(run_id=bad, source="cli")
    with pytest.raises(ValueError, match=RUN_ID_PATTERN.replace("[", r"\[").replace("{", r"\{")):
        check_run_id(bad)


@pytest.mark.parametrize("good", GOOD)
def test_good_run_ids_and_the_system_run_pass(good):
    assert parse({"type": "StopRun", "version": 1, "run_id": good}).run_id == good == check_run_id(good)
    assert StopRun(source="cli").run_id == SYSTEM_RUN


@registry.register
class _RunIdPing(Command):
    owner: ClassVar[str] = "runidsvc"
    type: Literal["SecRunIdPing"] = "SecRunIdPing"
    version: Literal[1] = 1


@registry.register
class _RunIdPong(Event):
    type: Literal["SecRunIdPong"] = "SecRunIdPong"
    version: Literal[1] = 1


async def test_a_command_with_a_bad_run_id_is_rejected_by_the_runner_and_the_next_good_one_handled(nats_server, run_id):
    spec = ServiceSpec(name="runidsvc", decide=lambda s, m, now: [Publish(m.caused(_RunIdPong, source="runidsvc"))]
                       if isinstance(m, _RunIdPing) else [], evolve=lambda s, e: s, event_subjects=(run_events(run_id),))
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_service(spec, nats_server.url, instance="runidsvc", stop=stop, ready=ready))
    await asyncio.wait_for(ready.wait(), 60)
    bus = await connect(nats_server.url, name="test")
    pongs = await bus.consumer([event_subject(run_id, "SecRunIdPong")], ack=False)
    try:
        bad = json.dumps({"type": "SecRunIdPing", "version": 1, "run_id": "../../elsewhere", "id": f"{run_id}-bad"})
        await bus.publish_raw(command_subject("runidsvc", "SecRunIdPing"), bad.encode(), msg_id=f"{run_id}-bad")
        await bus.publish(_RunIdPing(run_id=run_id, source="test"))
        assert await pongs.fetch(1, 60.0), "the good command after the bad one was not handled"   # in order: bad first
        rejected = await bus.consumer([event_subject(SYSTEM_RUN, "MessageRejected")], ack=False)
        reasons = []
        while await rejected.num_pending():
            reasons += [json.loads(d.data) for d in await rejected.fetch(1000, 5.0)]
        await rejected.close()
    finally:
        stop.set()
        await task
        await pongs.close()
        await bus.close()
    mine = [r for r in reasons if r["consumer"] == "runidsvc" and "../../elsewhere" in r["excerpt"]]
    assert mine and "run_id" in mine[0]["reason"] and "not a run id" in mine[0]["reason"]


def _cli(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:   # argparse refuses a bad argument with exit status 2
        code = int(e.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("bad", [b for b in BAD if not b.startswith("-")])
def test_every_cli_run_id_argument_refuses_a_bad_id_with_the_pattern(bad, capsys, tmp_path):
    """The pattern, or for an id that is only not lowercase ("R1"), a sentence naming the lowercase id to use."""
    state = ["--state-dir", str(tmp_path)]
    says = f"run ids are lowercase (letters, digits and '-'); use {bad.lower()!r}" if bad == "R1" else RUN_ID_PATTERN
    for argv in (["launch", "--data", "x.jsonl", "--run-id", bad], ["down", bad], ["status", bad], ["logs", bad],
                 ["tape", "show", bad], ["tape", "replay", bad], ["chaos", "kill", bad, "0"],
                 ["stack", "up", "--head", "--run-id", bad]):
        code, err = _cli(capsys, *state, *argv)
        assert code == 2 and "is not a run id" in err and says in err, (argv, code, err)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "tls").exists()


def test_an_option_looking_run_id_is_refused_too(capsys, tmp_path):
    code, err = _cli(capsys, "--state-dir", str(tmp_path), "launch", "--data", "x.jsonl", "--run-id=-x")
    assert code == 2 and "is not a run id" in err


@pytest.mark.parametrize("bad", BAD)
def test_paths_from_a_bad_run_id_are_refused(bad, tmp_path):
    with pytest.raises(ValueError, match="not a run id"):
        run_path(tmp_path, bad, "artifact")
    with pytest.raises(ValueError, match="not a run id"):
        StackPaths(tmp_path).run_dir(bad)


def test_run_paths_stay_inside_the_state_dir(tmp_path):
    state = tmp_path / "state"
    assert run_path(state, "r1", "logs", "island-0.log") == state / "runs" / "r1" / "logs" / "island-0.log"
    assert run_path(state, "r1", "artifact") == state / "runs" / "r1" / "artifact"    # where the writer puts it
    assert run_path(state, "r1", area="syncer") == state / "syncer" / "r1"
    for part in ("../x", "/etc", "logs/../../x", ""):
        with pytest.raises(ValueError, match="inside run r1"):
            run_path(state, "r1", part)
    (state / "runs").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (state / "runs" / "r2").symlink_to(tmp_path / "elsewhere")   # a link planted to lead the run's files out
    with pytest.raises(ValueError, match="leaves the run folder"):
        run_path(state, "r2", "artifact")
    (state / "runs" / "r3").mkdir()
    (state / "runs" / "r3" / "logs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="leaves the run folder"):
        run_path(state, "r3", "logs")


def test_the_head_refuses_a_bad_run_id_before_writing_its_config(tmp_path):
    with pytest.raises(ValueError, match="not a run id"):
        head_server(StackPaths(tmp_path), port=0, run_id='x"\n}\nauthorization {', hosts=["127.0.0.1"])
    assert list(tmp_path.iterdir()) == []
