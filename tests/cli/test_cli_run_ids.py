"""Run ids on the read and stop commands: an unknown one is a usage error (exit 2) with did-you-mean, `--last` is the
newest run, `yeto status` with no runs prints an empty table (exit 0), and `status --json` gives the same rows."""
from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tape"))
from tape_events import scripted_run
from yeto.cli.common import publish
from yeto.cli.main import main
from yeto.cli.runs import COLUMNS
from yeto.infra.bus import connect
from yeto.infra.bus.types import subject_of
from yeto.infra.stack import StackPaths
from yeto.infra.tape.store import TapeStore
from yeto.schemas.base import parse, to_bytes
from yeto.schemas.commands import StopRun


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A tape with r-one and, an hour later, r-late; no stack running."""
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    late = [e.model_copy(update={"ts": e.ts + timedelta(hours=1)}) for e in scripted_run("r-late")[:6]]
    events = scripted_run("r-one") + late
    store = TapeStore(StackPaths(tmp_path).db)
    store.append(list(range(1, len(events) + 1)), [e.run_id for e in events], [to_bytes(e).decode() for e in events])
    store.close()
    return tmp_path


@pytest.mark.parametrize("argv", [["status", "r-onw"], ["tape", "show", "r-onw"], ["tape", "replay", "r-onw"],
                                  ["sql", "--run", "r-onw", "select 1"], ["lineage", "r-onw"], ["logs", "r-onw"]])
def test_an_unknown_run_id_is_a_usage_error_that_names_the_closest_run(state, capsys, argv):
    assert main(["--state-dir", str(state), *argv]) == 2
    err = capsys.readouterr().err
    assert "r-onw" in err and "did you mean r-one?" in err and err.count("\n") == 1


def test_status_with_no_runs_prints_an_empty_table_and_succeeds(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    assert main(["--state-dir", str(tmp_path), "status"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == COLUMNS and out[-1] == "(0 rows)"
    assert main(["--state-dir", str(tmp_path), "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"runs": []}


def test_status_json_lists_the_runs_and_details_one(state, capsys):
    assert main(["--state-dir", str(state), "status", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["run_id"] for r in runs] == ["r-one", "r-late"] and set(runs[0]) == set(COLUMNS)
    assert main(["--state-dir", str(state), "status", "r-one", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["run_id"] == "r-one" and one["spend_usd"] > 0 and len(one["islands"]) == 2


def test_logs_last_is_the_newest_run(state, capsys):
    assert main(["--state-dir", str(state), "logs", "--last"]) == 2       # no lines anywhere: but of the right run
    assert "no log lines of run 'r-late'" in capsys.readouterr().err
    assert main(["--state-dir", str(state), "logs"]) == 2
    assert "give a run id, or --last" in capsys.readouterr().err


async def _last_stop(url: str, run_id: str):
    bus = await connect(url, name="test-stops")
    try:
        got = await bus.last(subject_of(StopRun(id="probe", run_id=run_id, source="cli")))
        return None if got is None else parse(got[1])
    finally:
        await bus.close()


def test_down_refuses_a_typo_and_stops_a_run_launched_an_instant_ago(fresh_nats, tmp_path, capsys):
    nats_server = fresh_nats
    launched = scripted_run("r-down-real")[0]
    asyncio.run(publish(nats_server.url, launched))    # on the bus, not yet on any tape: still a known run
    base = ["--state-dir", str(tmp_path), "--nats-url", nats_server.url]
    assert main([*base, "down", "r-down-rael"]) == 2
    assert "no run 'r-down-rael'" in capsys.readouterr().err
    assert asyncio.run(_last_stop(nats_server.url, "r-down-rael")) is None      # the typo stopped nothing
    assert main([*base, "down", "r-down-real"]) == 0
    assert "graceful stop" in capsys.readouterr().out
    stop = asyncio.run(_last_stop(nats_server.url, "r-down-real"))
    assert stop.run_id == "r-down-real" and not stop.now


def test_down_of_a_run_that_has_ended_says_so_and_still_tears_down(fresh_nats, tmp_path, capsys):
    finalized = [e for e in scripted_run("r-down-done") if type(e).__name__ in ("RunLaunched", "RunFinalized")]
    for event in finalized:
        asyncio.run(publish(fresh_nats.url, event))
    assert main(["--state-dir", str(tmp_path), "--nats-url", fresh_nats.url, "down", "r-down-done"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("r-down-done has already ended (finalized): nothing left to train") and "graceful" not in out
    assert asyncio.run(_last_stop(fresh_nats.url, "r-down-done")).run_id == "r-down-done"    # a head still up goes


def test_tape_show_json_gives_the_events_with_their_payloads(state, capsys):
    assert main(["--state-dir", str(state), "tape", "show", "r-one", "--type", "RoundMerged", "--json"]) == 0
    events = json.loads(capsys.readouterr().out)["events"]
    merged = [e for e in scripted_run("r-one") if type(e).__name__ == "RoundMerged"]
    assert [e["type"] for e in events] == ["RoundMerged"] * len(merged) and events[0]["seq"] < events[1]["seq"]
    assert events[0]["run_id"] == "r-one" and events[0]["payload"]["fragment"] == merged[0].fragment
