"""The dashboard's JSON endpoint over a real DuckDB tape file (the path `yeto sql` takes with the stack down): a
scripted run's islands, spans, rounds, curves and spend; events appended later show up on the next poll; the page
and the run list are served; a foreign Host header and an unknown run are refused."""
from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.request
from argparse import Namespace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tape"))
from tape_events import at, scripted_run
from yeto.cli.dashboard.server import serve
from yeto.infra.stack import StackPaths
from yeto.infra.tape.store import TapeStore
from yeto.schemas.base import to_bytes
from yeto.schemas.training import LearnerProgress


def write(db: Path, events: list, first_seq: int) -> None:
    store = TapeStore(db)
    store.append(list(range(first_seq, first_seq + len(events))), [e.run_id for e in events],
                 [to_bytes(e).decode() for e in events])
    store.close()


@pytest.fixture
def server(tmp_path):
    run = scripted_run("r-dash")
    write(StackPaths(tmp_path).db, run[:-1], 1)       # all but RunFinalized: the run is finalizing
    srv = serve(Namespace(state_dir=str(tmp_path), nats_url=None), "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", tmp_path, run
    srv.shutdown()
    srv.server_close()


def get(url: str, host: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_run_endpoint_draws_the_scripted_run_then_picks_up_new_events(server):
    base, home, run = server
    code, body = get(f"{base}/api/run/r-dash")
    d = json.loads(body)
    assert code == 200 and d["phase"] == "finalizing" and d["last_seq"] == len(run) - 1
    assert [(i["index"], i["phase"], i["generation"], i["gpu"]) for i in d["islands"]] == \
        [(0, "up", 0, "aws:8xa100 spot"), (1, "up", 1, "aws:8xa100 spot")]
    assert [(s["island"], s["generation"], s["start"], s["end"], s["started"], s["ended"]) for s in d["spans"]] == [
        (0, 0, 0.0, None, "up", None), (1, 0, 0.0, 1800.0, "up", "preempted"), (1, 1, 2400.0, None, "replaced", None)]
    assert d["train"] == {"island-0": [[600.0, 10, 2.5]], "island-1": [[1860.0, 20, 2.0], [2700.0, 5, 1.8]]}
    assert d["merged"] == [[720.0, 10, 2.5], [780.0, 10, 2.5], [3000.0, 20, 2.15]]    # on the step axis: the furthest
    assert [(r["fragment"], r["version"], r["responders"]) for r in d["rounds"]] == \
        [(0, 1, ["island-0", "island-1"]), (1, 1, ["island-0", "island-1"]), (0, 2, ["island-0", "island-1"])]
    assert d["max_spend"] == 10.0 and d["max_steps"] == 100 and d["step"] == 20 and d["spend_usd"] > 0
    assert "recipe" not in d and str(home) not in body.decode(), "no recipe, no local paths in the page's data"

    later = LearnerProgress(id="r-dash-eval", run_id="r-dash", source="learner", learner="island-0", step=30, loss=1.5,
                            eval_loss=1.7, tokens=3000, tokens_per_s=9.0, step_time_s=1.0, lr=1e-4, ts=at(56))
    write(StackPaths(home).db, [later, run[-1]], len(run))
    d = json.loads(get(f"{base}/api/run/r-dash")[1])
    assert d["phase"] == "finalized" and d["ended"] and d["eta_s"] is None and d["last_seq"] == len(run) + 1
    assert d["train"]["island-0"][-1] == [3360.0, 30, 1.5] and d["evals"] == {"island-0": [[3360.0, 30, 1.7]]}
    assert all(s["end"] is not None or s["ended"] is None for s in d["spans"]) and d["tokens_per_s"] == 0.0


def test_the_page_and_the_run_list_are_served_and_strangers_are_refused(server):
    base, _, _ = server
    code, page = get(f"{base}/run/r-dash")
    assert code == 200 and b"/api/run/" in page and b"<svg id=\"loss\"" in page and b"http://" not in page.replace(
        b"http://www.w3.org", b""), "the page loads nothing from elsewhere"
    code, body = get(f"{base}/api/runs")
    assert code == 200 and [r["run_id"] for r in json.loads(body)["runs"]] == ["r-dash"]
    assert get(f"{base}/api/run/r-nope")[0] == 404
    assert get(f"{base}/api/run/bad%20id")[0] == 503
    code, body = get(f"{base}/api/runs", host="evil.example:80")
    assert code == 403 and b"not served" in body
