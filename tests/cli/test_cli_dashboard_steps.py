"""The dashboard's step view over a real DuckDB tape file: every step a report carries (loss, lr, throughput, gradient
norm) placed at its own time and step, the run's config panel (names and numbers, no paths) with how each learner runs,
a second run side by side (`?compare=RUN2`) read through the same API, and, in a real headless Chromium, the page
drawing both runs' curves on the step axis with smoothing and the config of both."""
from __future__ import annotations

import json
import shutil
import sys
import threading
from argparse import Namespace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tape"))
sys.path.insert(0, str(Path(__file__).parent))
from tape_events import SPEC, at
from test_cli_dashboard_api import get, write
from yeto.cli.dashboard.server import serve
from yeto.infra.stack import StackPaths
from yeto.schemas.final import RunFinalized
from yeto.schemas.fleet import IslandUp, RunLaunched
from yeto.schemas.progress import LearnerStarted, StepPoint
from yeto.schemas.training import LearnerProgress

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def a_run(run_id: str, lr: float, model: str) -> list:
    """A run with one island: it says how it runs, then two reports of three steps each (a step takes 20 s), then ends."""
    def report(n: int, minute: float) -> LearnerProgress:
        steps = [StepPoint(step=s, loss=3.0 - 0.1 * s, lr=lr * s / 6, tokens=400, tokens_per_s=20.0 + s,
                           step_time_s=20.0, grad_norm=1.0 / s) for s in range(3 * n + 1, 3 * n + 4)]
        last = steps[-1]
        return LearnerProgress(id=f"{run_id}-p{n}", run_id=run_id, source="island-0", learner="island-0", step=last.step,
                               loss=last.loss, tokens=1200 * (n + 1), tokens_per_s=last.tokens_per_s,
                               step_time_s=20.0, lr=last.lr, steps=steps, ts=at(minute))
    recipe = {"train": {"model": model, "data": "/home/someone/secret/chat.jsonl", "max_steps": 6, "lr": lr,
                        "lora_r": 8, "seq_len": 256}, "output": "/home/someone/out"}
    return [RunLaunched(id=f"{run_id}-l", run_id=run_id, source="launcher", fleet=[SPEC], recipe=recipe, ts=at(0)),
            IslandUp(id=f"{run_id}-u", run_id=run_id, source="launcher", island=0, spec=SPEC, price_per_hour=1.0, ts=at(0)),
            LearnerStarted(id=f"{run_id}-s", run_id=run_id, source="island-0", learner="island-0", backend="torch",
                           ranks=2, shard="FSDP2", tuning="lora", dtype="bfloat16", quantization="none", device="cuda",
                           trainable=1000, parameters=100_000, ts=at(1)),
            report(0, 2), report(1, 3),
            RunFinalized(id=f"{run_id}-f", run_id=run_id, source="finalizer", output="/out", manifest_sha256="1" * 64,
                         reason="max_steps", spend_usd=0.07, ts=at(4))]


@pytest.fixture
def server(tmp_path):
    write(StackPaths(tmp_path).db, a_run("r-one", 3e-3, "/home/someone/models/tiny-llama") +
          a_run("r-two", 1e-3, "HuggingFaceTB/SmolLM2-135M"), 1)
    srv = serve(Namespace(state_dir=str(tmp_path), nats_url=None), "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_every_step_of_a_report_is_drawn_at_its_own_step_and_time(server):
    code, body = get(f"{server}/api/run/r-one")
    d = json.loads(body)
    assert code == 200
    # the first report at minute 2 (120 s) holds steps 1..3, 20 s apart: the last at the report's time
    assert d["train"]["island-0"][:3] == [[80.0, 1, pytest.approx(2.9)], [100.0, 2, pytest.approx(2.8)],
                                          [120.0, 3, pytest.approx(2.7)]]
    assert [p[1] for p in d["train"]["island-0"]] == [1, 2, 3, 4, 5, 6]
    assert [p[2] for p in d["lr"]["island-0"]] == pytest.approx([3e-3 * s / 6 for s in range(1, 7)])
    assert [p[2] for p in d["throughput"]["island-0"]] == [21.0, 22.0, 23.0, 24.0, 25.0, 26.0]
    assert [p[2] for p in d["grad_norm"]["island-0"]] == pytest.approx([1 / s for s in range(1, 7)])


def test_the_config_panel_names_the_settings_and_how_each_learner_runs_without_a_path(server):
    d = json.loads(get(f"{server}/api/run/r-one")[1])
    settings = d["config"]["settings"]
    assert settings["model"] == "tiny-llama" and (settings["lr"], settings["lora_r"], settings["seq_len"]) == (3e-3, 8, 256)
    assert settings["max_steps"] == 6 and settings["inner_steps"] > 0
    assert d["config"]["learners"] == {"island-0": {"backend": "torch", "ranks": 2, "shard": "FSDP2", "tuning": "lora",
                                                    "dtype": "bfloat16", "quantization": "none", "device": "cuda",
                                                    "trainable": 1000, "parameters": 100_000}}
    assert "/home/someone" not in json.dumps(d), "no local path (model, data, output) in the page's data"
    assert json.loads(get(f"{server}/api/run/r-two")[1])["config"]["settings"]["model"] == "HuggingFaceTB/SmolLM2-135M"


def test_the_page_has_the_step_axis_smoothing_lr_throughput_config_and_compare(server):
    code, page = get(f"{server}/run/r-one?compare=r-two")
    assert code == 200
    for needle in (b'id="axis"', b'id="smooth"', b'<svg id="lr"', b'<svg id="throughput"', b'<svg id="grad-norm"',
                   b'<table id="config"', b'id="compare"', b'params.get("compare")'):
        assert needle in page, needle


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (`apt-get install chromium`; .ci/run installs it)")
def test_chromium_draws_two_runs_side_by_side_on_the_step_axis_with_smoothing(server, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1280, "height": 1100}, bypass_csp=True)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{server}/run/r-one?compare=r-two&smooth=0.5")
        page.wait_for_function("document.querySelectorAll('#config tr.setting').length > 5 "
                               "&& document.querySelectorAll('#lr path.curve').length === 2", timeout=60_000)
        curves = page.evaluate("[...document.querySelectorAll('svg path.curve')].map(c => [c.closest('svg').id, "
                               "c.dataset.series, Number(c.dataset.n)])")
        for chart in ("loss", "lr", "throughput", "grad-norm"):
            assert [chart, "r-one island-0", 6] in curves and [chart, "r-two island-0", 6] in curves, (chart, curves)
        assert page.locator("#axis").input_value() == "step" and page.locator("#smooth-value").inner_text() == "0.5"
        assert page.locator("#config-other").inner_text() == "r-two"
        lr_row = page.evaluate("[...document.querySelectorAll('#config tr.setting')].map(r => r.innerText)"
                               ".find(t => t.startsWith('lr'))")
        assert "0.003" in lr_row and "0.001" in lr_row, lr_row
        assert "r-one island-0 (2.4905)" in page.locator("#legend").inner_text()     # smoothed: raw, the last is 2.4
        assert "FSDP2" in page.locator("#how").inner_text() and errors == [], errors
        page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)
        browser.close()
    print(f"screenshot: {tmp_path}/compare.png")
