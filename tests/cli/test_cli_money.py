"""Money words: --budget-per-hour ($/hr; the old --budget warns), one-line catalog errors offline, and `yeto shape`
showing prices one way (with the margin, said once) with identical islands grouped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from yeto.cli.main import main
from yeto.services.planner.catalog import FIXTURE_DIR, catalog_failure

SHAPE = ["shape", "--model", "qwen35-9b", "--catalog-dir", str(FIXTURE_DIR)]


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("YETO_HOME", str(tmp_path))
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)


def test_budget_per_hour_plans_and_the_old_name_warns_but_plans_the_same(capsys):
    assert main([*SHAPE, "--budget-per-hour", "40", "--json"]) == 0
    new = capsys.readouterr()
    assert main([*SHAPE, "--budget", "40", "--json"]) == 0
    old = capsys.readouterr()
    assert "deprecated" not in new.err and "--budget is deprecated; say --budget-per-hour" in old.err
    drop = ("solve_seconds", "gap")
    assert {k: v for k, v in json.loads(new.out).items() if k not in drop} == \
        {k: v for k, v in json.loads(old.out).items() if k not in drop}


def test_a_catalog_download_that_fails_is_said_in_one_line():
    chain = ("Traceback (most recent call last):\n  File \"x.py\", line 1\nsocket.gaierror: [Errno -2] Name or service "
             "not known\n\nDuring handling of the above exception, another exception occurred:\n\n"
             "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='raw.githubusercontent.com', port=443): "
             "Max retries exceeded with url: /skypilot-org/skypilot-catalog/master/catalogs/v6/aws/vms.csv\n")
    assert catalog_failure(chain, 1) == "SkyPilot could not download it (no network?)"
    assert catalog_failure("Traceback ...\nKeyError: 'aws'\n", 1) == "KeyError: 'aws'"
    assert catalog_failure("", 3) == "exit status 3"


def test_shape_groups_identical_islands_and_prices_them_with_the_margin_said_once(capsys):
    assert main([*SHAPE, "--budget-per-hour", "40", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert main([*SHAPE, "--budget-per-hour", "40"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if "×" in line]
    counts = {}
    for i in plan["islands"]:
        counts[i["instance_type"]] = counts.get(i["instance_type"], 0) + 1
    assert {r[2]: int(r[0].rstrip("×")) for r in rows} == counts and max(counts.values()) > 1   # one row per offering
    by_type = {i["instance_type"]: i["price_per_hour"] for i in plan["islands"]}
    assert all(float(r[4 if r[3] in ("spot", "on-demand") else 5]) == pytest.approx(by_type[r[2]] * 1.1, abs=0.006)
               for r in rows)
    total = float(next(line for line in out.splitlines() if line.strip().startswith("total")).split()[1])
    assert total == pytest.approx(sum(by_type[i["instance_type"]] for i in plan["islands"]) * 1.1 + 0.19, abs=0.01)
    assert sum("margin" in line for line in out.splitlines()) == 1 and "include the 10% price margin" in out


def test_shape_with_data_estimates_hours_and_cost_from_the_data_s_tokens(tmp_path, capsys):
    sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))
    import learner_tiny
    from yeto.infra.model_source import resolve
    from yeto.learners.data import DataSpec, check_data
    from yeto.learners.torch.api import load_tokenizer

    model = learner_tiny.write_model_dir(tmp_path / "model")
    data = learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", num_rows=50)
    argv = ["shape", "--model", str(model), "--weights-gb", "18", "--budget-per-hour", "40", "--catalog-dir",
            str(FIXTURE_DIR), "--data", str(data), "--epochs", "3", "--seq-len", "64"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("Estimate:"))
    tokens = check_data(DataSpec(source=str(data), seq_len=64), load_tokenizer(resolve(str(model)))).tokens.num_tokens
    assert main([*argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    tok_s = plan["total_tflops"] * 1e12 / (4 * 9e9)                  # LoRA: 4 FLOPs per parameter and token
    hours = tokens * 3 / tok_s / 3600
    usd = plan["islands_price_per_hour"] * 1.1 + plan["head_price_per_hour"]
    assert f"{tokens:,} tokens x 3 epoch(s)" in line and f"= {hours:.2f} h, ${hours * usd:.2f} at ${usd:.2f}/hr" in line
    assert f"--data {data}" in out                                    # the launch line carries the data


def test_shape_with_no_catalog_reachable_exits_1_naming_the_shipped_sample(tmp_path):
    """SkyPilot cannot download its catalog here (no network, a fresh HOME): a condition of the machine, exit status
    1, and the message names the sample catalog shipped with Yeto."""
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "yeto.cli.main", "--state-dir", str(tmp_path / "s"), "shape",
                           "--model", "smollm2-135m", "--budget-per-hour", "10"], capture_output=True, text=True,
                          timeout=240, env=env)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "reading the SkyPilot catalog failed" in done.stderr and f"--catalog-dir {FIXTURE_DIR}" in done.stderr
