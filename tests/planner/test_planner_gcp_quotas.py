"""GCP's regional GPU quotas through google-cloud-compute against a real HTTP server replaying `regions.list`
(tests/planner/gcp_server.py: the service account's signed JWT checked, the recorded answer in the documented
schema), and what they do to the plan: a region with no room rejects the shape, a small one caps it and the plan
moves the rest of the fleet to another region."""
from __future__ import annotations

import socket
from dataclasses import replace

import pytest

from gcp_server import GcpCompute, environment
from yeto.services.planner.catalog import FIXTURE_DIR, load_catalog
from yeto.services.planner.plan import plan_fleet
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import SOURCES, Signals, gather_signals

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def no_gcp_account(monkeypatch, tmp_path):
    """No application-default credentials anywhere (HOME is empty), no project."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "YETO_GCP_COMPUTE_URL"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture
def gcp(no_gcp_account, monkeypatch, tmp_path):
    server = GcpCompute().start(tmp_path)
    for k, v in environment(server).items():
        monkeypatch.setenv(k, v)
    yield server
    server.stop()


def gather(tmp_path, now: float = 1000.0, sources=None) -> Signals:
    return gather_signals(["gcp"], cache_path=tmp_path / "signals.json", now=now, sources=sources)


def test_gcp_gpu_quotas_minus_usage_per_region_through_google_cloud_compute(gcp, tmp_path):
    s = gather(tmp_path)
    assert s.warnings == () and gcp.requests == ["GET /compute/v1/projects/yeto-test/regions"]
    got = {(q.region, q.gpu, q.spot): (q.limit, q.used) for q in s.quotas}
    assert got == {("us-central1", "H100", False): (8, 0), ("us-central1", "H100", True): (16, 4),
                   ("us-central1", "T4", False): (4, 0), ("us-central1", "T4", True): (4, 0),    # no preemptible
                   ("us-east4", "H100", False): (8, 2), ("us-east4", "H100", True): (8, 2),      # limit 0: on-demand's
                   ("europe-west4", "A100-80GB", False): (4, 0), ("europe-west4", "A100-80GB", True): (4, 0),
                   ("europe-west4", "H100", True): (1, 1)}       # no VWS or committed metric, no CPUS
    assert {r.signal for r in s.readings} == {"quota"} and all(r.age_s == 0.0 for r in s.readings)
    assert all(r.source == f"gcp compute regions.list (project yeto-test) at {gcp.url}" for r in s.readings)
    assert "PRIVATE KEY" not in (tmp_path / "signals.json").read_text()       # the answer is cached, not the key
    again = gather(tmp_path, now=1000.0 + SOURCES["gcp"].ttl_s - 1)
    assert len(gcp.requests) == 1 and again.quotas == s.quotas


def test_a_gcp_quota_rejects_a_region_without_room_and_moves_the_fleet_past_a_small_one(gcp, tmp_path, monkeypatch):
    catalog = load_catalog(catalog_dir=FIXTURE_DIR, clouds=["gcp"])
    req = PlanRequest(model="qwen35-9b", budget=40.0, clouds=("gcp",))
    live = plan_fleet(req, catalog, gather(tmp_path))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    blind = plan_fleet(req, catalog, gather(tmp_path / "blind"))

    def gpus(plan, region: str) -> int:
        return sum(i["count"] for i in plan.islands if i["region"] == region)
    assert gpus(blind, "us-east4") == 14 and gpus(blind, "us-central1") == 0      # the cheapest region, on assumptions
    assert gpus(live, "us-east4") == 6 and gpus(live, "us-central1") == 6         # 8 - 2 used; the rest moved
    assert "quota gcp/us-east4/H100/spot gpus: 6 of 6 available" in live.binding
    assert {"shape": "gcp:1xh100@europe-west4 (a3-highgpu-1g)", "code": "quota",
            "reason": "quota minus current usage leaves no room: gcp/europe-west4/H100/spot gpus: 0 left, one island "
                      "needs 1"} in live.rejected


def test_without_credentials_or_with_a_silent_endpoint_gcp_plans_on_the_stated_assumption(
        no_gcp_account, tmp_path, monkeypatch):
    s = gather(tmp_path)
    assert s.quotas == () and [r.signal for r in s.readings] == ["assumption"]
    assert s.warnings == ("gcp: no application-default credentials (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth "
                          "application-default login`) or their query failed: regional GPU quotas not checked; "
                          "assumed up to 4 islands per instance type and region.",)
    server = GcpCompute().start(tmp_path)        # credentials, but the endpoint connects and never answers
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    for k, v in {**environment(server), "YETO_GCP_COMPUTE_URL": f"http://127.0.0.1:{silent.getsockname()[1]}"}.items():
        monkeypatch.setenv(k, v)
    try:
        s = gather(tmp_path, sources={"gcp": replace(SOURCES["gcp"], timeout_s=0.5)})
    finally:
        silent.close()
        server.stop()
    assert s.quotas == () and s.warnings[0].startswith("gcp: live signals failed (") and "timed out" in s.warnings[0]
    assert "regional GPU quotas not checked" in s.warnings[1]
    assert not (tmp_path / "signals.json").exists()       # a failure is not cached: the next plan asks again
