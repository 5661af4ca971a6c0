"""`yeto shape` through the real CLI entry point on the fixture catalog."""
import json

import pytest

from yeto.cli.main import main
from yeto.schemas.gpuspec import parse_gpu
from yeto.services.planner.catalog import FIXTURE_DIR

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("YETO_HOME", str(tmp_path))
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)


def test_shape_prints_plan_rejections_warnings_and_launch_line(capsys):
    assert main(["shape", "--model", "qwen35-9b", "--budget", "40", "--catalog-dir", str(FIXTURE_DIR)]) == 0
    out = capsys.readouterr().out
    assert "OPTIMAL" in out and "Rejected shapes" in out and "no bf16 tensor cores" in out
    assert "runpod: RUNPOD_API_KEY not set" in out
    line = out.strip().splitlines()[-1].strip()
    assert line.startswith("yeto launch --model qwen35-9b --gpu ")
    assert parse_gpu(line.split("--gpu ")[1].split()[0])


def test_shape_json_has_the_documented_keys_and_the_gpu_line_parses_back(capsys):
    assert main(["shape", "--model", "llama31-70b", "--flops", "5000", "--clouds", "aws,gcp,lambda",
                 "--catalog-dir", str(FIXTURE_DIR), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["total_tflops"] >= 5000 and plan["mode"] == "target"
    assert {i["cloud"] for i in plan["islands"]} <= {"aws", "gcp", "lambda"}
    specs = parse_gpu(plan["gpu"])
    assert [(s.cloud, s.gpu, s.count, s.nodes, s.region) for s in specs] == \
        [(i["cloud"], i["gpu"], i["count"], i["nodes"], i["region"]) for i in plan["islands"]]
    assert f"--gpu {plan['gpu']}" in plan["launch_command"]


def test_a_budget_nothing_fits_exits_nonzero_naming_the_cheapest_option(capsys):
    assert main(["shape", "--model", "qwen35-9b", "--budget", "1", "--catalog-dir", str(FIXTURE_DIR)]) == 1
    err = capsys.readouterr().err
    assert "fits no island: the cheapest option is runpod:1xa100-80gb@CA" in err


def test_user_errors_exit_2_with_what_to_fix(capsys):
    assert main(["shape", "--model", "qwen35-9b", "--catalog-dir", str(FIXTURE_DIR)]) == 2
    assert "--budget" in capsys.readouterr().err
    assert main(["shape", "--model", "nope", "--budget", "5", "--catalog-dir", str(FIXTURE_DIR)]) == 2
