"""Live signals through their real clients against real protocol servers, and what they do to the plan.

AWS: boto3 against moto's server (running instances, instance types) behind a front answering the recorded calls
moto does not serve (tests/planner/signal_servers.py); RunPod's GraphQL and Lambda's instance-types API replayed
from tests/fixtures/planner_signals/. The catalog is the fixture catalog read through SkyPilot.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from signal_servers import LAMBDA_KEY, RUNPOD_KEY, AwsFront, Recorded, environment
from yeto.cli.main import main
from yeto.schemas.memory_model import Workload
from yeto.services.planner.candidates import Candidate, screen
from yeto.services.planner.catalog import FIXTURE_DIR, Offering, load_catalog
from yeto.services.planner.gpus import GPUS, RECOVERY_HOURS, SPOT_PREEMPTIONS_PER_HOUR
from yeto.services.planner.plan import plan_fleet
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import SOURCES, Signals, gather_signals

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def catalog() -> list[Offering]:
    return load_catalog(catalog_dir=FIXTURE_DIR)


@pytest.fixture
def servers(monkeypatch, tmp_path):
    """Moto behind the recorded AWS front, and the recorded RunPod/Lambda server; the env points the clients there."""
    aws, rec = AwsFront().start(), Recorded().start()
    for k, v in environment(aws, rec).items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("YETO_HOME", str(tmp_path / "home"))
    yield aws, rec
    aws.stop()
    rec.stop()


def run_spot(aws: AwsFront, region: str, itype: str, n: int) -> None:
    import boto3
    boto3.client("ec2", region_name=region, endpoint_url=aws.url).run_instances(
        ImageId="ami-12c6146b", MinCount=n, MaxCount=n, InstanceType=itype,
        InstanceMarketOptions={"MarketType": "spot"})


def gather(tmp_path, clouds=("aws", "runpod", "lambda", "gcp"), now=1000.0, sources=None) -> Signals:
    return gather_signals(list(clouds), cache_path=tmp_path / "signals.json", now=now, sources=sources)


def test_aws_quota_minus_moto_usage_scores_and_spot_prices_through_boto3(servers, tmp_path):
    aws, _ = servers
    run_spot(aws, "us-east-2", "p5.48xlarge", 2)
    s = gather(tmp_path, clouds=("aws",))
    quota = {(q.region, q.family, q.spot): q for q in s.quotas}
    assert quota[("us-east-2", "p", True)].limit == 768 and quota[("us-east-2", "p", True)].used == 2 * 192
    assert quota[("us-east-2", "p", False)].used == 0 and quota[("us-east-1", "p", True)].limit == 384
    assert s.score("aws", "us-east-2", "p5.48xlarge") == 8 and s.score("aws", "eu-north-1", "p5.48xlarge") == 2
    assert s.spot_prices[("aws", "us-east-2", "p5.48xlarge")] == 11.4871     # the cheaper of the region's zones
    assert "DescribeInstances us-east-2 -> moto" in aws.requests and "GetSpotPlacementScores us-east-1" in aws.requests
    assert not any(w.startswith("aws") for w in s.warnings)
    kinds = {r.signal for r in s.readings if r.cloud == "aws"}
    assert kinds == {"quota", "placement_score", "spot_price"}
    assert all(aws.url in r.source and r.age_s == 0.0 for r in s.readings if r.cloud == "aws")


def test_runpod_and_lambda_stock_from_their_recorded_apis(servers, tmp_path):
    _, rec = servers
    s = gather(tmp_path, clouds=("runpod", "lambda"))
    assert s.stock[("runpod", "A100-80GB")] == 8 and s.stock[("runpod", "H100")] == 1
    assert s.stock[("runpod", "RTX4090")] == 0
    assert s.stock_cap("lambda", "us-east-3", "gpu_1x_gh200", "GH200") == 4
    assert s.stock_cap("lambda", "us-east-1", "gpu_8x_h100_sxm5", "H100") == 0     # capacity only in us-west-3
    assert s.stock_cap("lambda", "us-west-3", "gpu_8x_h100_sxm5", "H100") == 4
    assert s.warnings == ()
    assert rec.requests == ["POST /graphql", "GET /api/v1/instance-types"]     # the keys went in headers, not URLs


def test_a_refused_key_or_a_silent_server_degrades_to_the_stated_assumption(servers, tmp_path, monkeypatch):
    monkeypatch.setenv("RUNPOD_API_KEY", "wrong")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)      # connects, never answers: only the source's timeout ends the wait
    monkeypatch.setenv("YETO_LAMBDA_API_URL", f"http://127.0.0.1:{silent.getsockname()[1]}/api/v1/instance-types")
    try:
        s = gather(tmp_path, clouds=("runpod", "lambda"), sources={"lambda": replace(SOURCES["lambda"], timeout_s=0.5)})
    finally:
        silent.close()
    text = "\n".join(s.warnings)
    assert "runpod: live signals failed (HTTPError: HTTP Error 401" in text
    assert "lambda: live signals failed" in text and "timed out" in text
    assert "runpod: RUNPOD_API_KEY not set or its query failed: stock unknown; assumed up to 4" in text
    assert "lambda: LAMBDA_API_KEY not set or its query failed" in text
    assert s.stock == {} and RUNPOD_KEY not in text and LAMBDA_KEY not in text and "wrong" not in text
    assert {(r.cloud, r.signal) for r in s.readings} == {("runpod", "assumption"), ("lambda", "assumption")}
    assert not (tmp_path / "signals.json").exists()        # a failure is not cached: the next plan asks again


def test_each_source_is_cached_for_its_ttl_and_the_age_is_reported(servers, tmp_path):
    aws, rec = servers
    first = gather(tmp_path, clouds=("aws", "runpod"), now=1000.0)
    asked = (len(aws.requests), len(rec.requests))
    later = gather(tmp_path, clouds=("aws", "runpod"), now=1000.0 + SOURCES["runpod"].ttl_s - 1)
    assert (len(aws.requests), len(rec.requests)) == asked and later.stock == first.stock
    assert {r.age_s for r in later.readings} == {SOURCES["runpod"].ttl_s - 1}
    stale = gather(tmp_path, clouds=("aws", "runpod"), now=1000.0 + SOURCES["runpod"].ttl_s + 1)
    assert len(rec.requests) == asked[1] + 1 and len(aws.requests) == asked[0]    # aws's TTL is longer
    assert {r.age_s for r in stale.readings if r.cloud == "runpod"} == {0.0}


def test_a_quota_below_one_island_rejects_the_shape_and_usage_in_moto_caps_the_fleet(servers, tmp_path, catalog):
    aws, _ = servers
    req = PlanRequest(model="qwen35-9b", budget=80.0, clouds=("aws",), regions=("us-east-2",))
    free = plan_fleet(req, catalog, gather(tmp_path, clouds=("aws",)))
    assert [i["region"] for i in free.islands] == ["us-east-2"] * 4, (free.binding, free.rejected)   # the stock cap binds
    run_spot(aws, "us-east-2", "p5.48xlarge", 3)                                       # 576 of 768 vCPUs in use
    capped = plan_fleet(req, catalog, gather(tmp_path, clouds=("aws",), now=1e6))
    assert len(capped.islands) == 1 and any("aws/us-east-2/p/spot vcpus" in b for b in capped.binding)
    aws.quotas["us-east-2"]["L-7212CCBC"] = 96.0
    refused = plan_fleet(req, catalog, gather(tmp_path, clouds=("aws",), now=2e6))
    assert not refused.feasible
    why = [r for r in refused.rejected if r["code"] == "quota"]
    assert why and why[0]["shape"] == "aws:8xh100@us-east-2 (p5.48xlarge)"
    assert why[0]["reason"] == ("quota minus current usage leaves no room: aws/us-east-2/p/spot vcpus: -480 left, "
                                "one island needs 192")


def test_a_low_placement_score_moves_the_plan_to_another_region(servers, tmp_path, catalog):
    aws, _ = servers
    req = PlanRequest(model="qwen35-9b", budget=30.0, clouds=("aws",), regions=("us-east-2", "us-west-2"))
    aws.prices["us-west-2"] = [["p5.48xlarge", "us-west-2a", "11.4871"]]               # same price as us-east-2
    aws.quotas["us-west-2"] = {"L-7212CCBC": 768.0}                                    # and the same room
    aws.scores["p5.48xlarge"].update({"us-east-2": 9, "us-west-2": 3})
    before = plan_fleet(req, catalog, gather(tmp_path, clouds=("aws",), now=0.0))
    aws.scores["p5.48xlarge"].update({"us-east-2": 3, "us-west-2": 9})
    after = plan_fleet(req, catalog, gather(tmp_path, clouds=("aws",), now=1e6))
    assert [i["region"] for i in before.islands] == ["us-east-2"] * 2
    assert [i["region"] for i in after.islands] == ["us-west-2"] * 2
    aws.scores["p5.48xlarge"].update({"us-west-2": 1})                                 # "not at all likely"
    gone = plan_fleet(req, catalog, gather(tmp_path, clouds=("aws",), now=2e6))
    assert [i["region"] for i in gone.islands] == ["us-east-2"] * 2
    assert {"shape": "aws:8xh100@us-west-2 (p5.48xlarge)", "code": "stock",
            "reason": "out of stock: spot placement score 1/10 in us-west-2: a spot request is not likely to "
                      "succeed"} in gone.rejected


@pytest.mark.parametrize("score", [None, 2.0, 5.5, 8.0, 10.0])
def test_expected_preemption_cost_follows_the_formula_in_planner_md(score):
    doc = (ROOT / "docs" / "PLANNER.md").read_text()
    assert "goodput = 1 / (1 + r x 0.25 h)" in doc and "2^((5.5 - score)/4.5)" in doc and "aws 0.05" in doc
    o = Offering("aws", "us-east-2", "p5.48xlarge", "H100", 8, 192.0, 2048.0, 55.04, 11.25)
    signals = Signals(placement_scores={} if score is None else {("aws", "us-east-2", "p5.48xlarge"): score})
    c = screen(o, PlanRequest(model="qwen35-9b", weights_gb=18.0, budget=100.0), Workload(weights_gb=18.0), signals)
    assert isinstance(c, Candidate)
    rate = 0.05 * (1.0 if score is None else 2 ** ((5.5 - score) / 4.5))     # the doc's numbers, written out
    assert SPOT_PREEMPTIONS_PER_HOUR["aws"] == 0.05 and RECOVERY_HOURS == 0.25
    assert c.tflops == pytest.approx(8 * GPUS["H100"].peak_bf16_tflops * GPUS["H100"].mfu / (1 + rate * 0.25))


def test_shape_shows_live_quotas_scores_and_stock_and_the_plan_changes_when_stock_says_none(servers, capsys, tmp_path):
    _, rec = servers
    # a copy: with AWS credentials SkyPilot caches the zone map it reads (here from moto) beside the catalog
    shutil.copytree(FIXTURE_DIR, tmp_path / "catalog")
    args = ["shape", "--model", "qwen35-9b", "--budget-per-hour", "40", "--catalog-dir", str(tmp_path / "catalog")]
    assert main(args + ["--explain-signals"]) == 0
    out = capsys.readouterr().out
    assert "aws     quota           aws/us-east-2/p/spot vcpus         768 left (768 - 0 used)" in out
    assert "aws     placement_score us-east-2/p5.48xlarge              8/10" in out
    assert "runpod  stock           A100-80GB                          High: 8 islands" in out
    assert "lambda  stock           us-east-3/gpu_1x_gh200             capacity: 4 islands" in out
    assert "gcp     assumption: gcp: no application-default credentials" in out and "age    0 s" in out
    assert ("Live signals: aws 16 placement score, 32 quota, 8 spot price; lambda 6 stock; runpod 5 stock (oldest 0 s); "
            "assumed for azure, gcp (--explain-signals lists each)") in out

    narrow = args + ["--clouds", "lambda,runpod", "--json"]
    assert main(narrow) == 0
    plan = json.loads(capsys.readouterr().out)
    best = max(plan["islands"], key=lambda i: i["tflops"] / i["price_per_hour"])
    assert (best["cloud"], best["instance_type"]) == ("lambda", "gpu_1x_gh200")
    assert {(r["cloud"], r["signal"]) for r in plan["signals"]} == {("lambda", "stock"), ("runpod", "stock")}
    assert all(r["age_s"] is not None and rec.url in r["source"] for r in plan["signals"])

    rec.no_lambda_capacity("gpu_1x_gh200")
    (Path(os.environ["YETO_HOME"]) / "cache" / "signals.json").unlink()    # past the TTL: the next plan asks again
    assert main(narrow) == 0
    moved = json.loads(capsys.readouterr().out)
    assert all(i["instance_type"] != "gpu_1x_gh200" for i in moved["islands"])
    assert {"shape": "lambda:1xgh200@us-east-3 (gpu_1x_gh200)", "code": "stock",
            "reason": "out of stock: lambda reports no GH200 (gpu_1x_gh200) capacity in us-east-3"} in moved["rejected"]
    assert moved["gpu"] != plan["gpu"]
