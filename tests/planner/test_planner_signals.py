"""Signals: stated assumptions without credentials, TTL cache of live answers, RunPod name mapping."""
import json

import pytest

from yeto.services.planner.signals import _cached, gather_signals
from yeto.services.planner.signals_runpod import catalog_name

pytestmark = pytest.mark.timeout(30)


def test_without_credentials_every_cloud_gets_a_stated_assumption(tmp_path):
    s = gather_signals(["aws", "gcp", "runpod"], cache_path=tmp_path / "s.json", now=0.0, env={})
    text = "\n".join(s.warnings)
    assert "aws: no live signals" in text and "L-7212CCBC" in text
    assert "runpod: RUNPOD_API_KEY not set" in text and "gcp: no application-default credentials" in text
    assert s.quotas == () and s.stock == {}


def test_cache_reuses_answers_within_ttl_and_refetches_after(tmp_path):
    calls = []

    def fetch() -> dict:
        calls.append(1)
        return {"n": len(calls)}

    path = tmp_path / "cache.json"
    assert _cached(path, "aws", 100.0, 60.0, fetch) == ({"n": 1}, 100.0)
    assert _cached(path, "aws", 150.0, 60.0, fetch) == ({"n": 1}, 100.0)
    assert _cached(path, "aws", 161.0, 60.0, fetch) == ({"n": 2}, 161.0)
    assert json.loads(path.read_text())["aws"]["at"] == 161.0


@pytest.mark.parametrize("display, mem, name", [("A100 80GB PCIe", 80, "A100-80GB"), ("A100 SXM 40GB", 40, "A100"),
                                                ("H100 80GB HBM3", 80, "H100"), ("RTX A6000", 48, "A6000"),
                                                ("RTX 4090", 24, "RTX4090"), ("L40S", 48, "L40S"), ("MI300X", 192, None)])
def test_runpod_display_names_map_to_skypilot_names(display, mem, name):
    assert catalog_name(display, mem) == name
