"""Same seed, same syncer history: the scenario of syncer_scenario.py against its golden fixture, which
scripts/gen_golden.py --syncer recorded on purpose (this test never writes it)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import syncer_scenario

GOLDEN = Path(__file__).parent / "fixtures" / "syncer_golden.json"
F64_REL = 1e-12   # weights and grace times are float64 arithmetic; only libm's pow (staleness^lag) may differ by an ulp
F32_REL = 1e-5    # Θ and G are f32 sums (the fused step, Gram chunks) whose order differs between BLAS builds and CPUs
EXACT = ("fragment", "global_version", "responders", "staleness", "tokens", "merge")


@pytest.mark.timeout(60)
def test_same_seed_gives_the_golden_syncer_history():
    golden, now = json.loads(GOLDEN.read_text()), syncer_scenario.history()
    assert now["seed"] == golden["seed"]
    assert now["rejected"] == golden["rejected"] and now["published"] == golden["published"]
    assert len(now["rounds"]) == len(golden["rounds"]) == 18
    for got, want in zip(now["rounds"], golden["rounds"]):
        where = f"fragment {want['fragment']} version {want['global_version']}"
        assert {k: got[k] for k in EXACT} == {k: want[k] for k in EXACT}, where
        for key in ("weights", "grace_ms", "quorum_ms"):
            assert got[key] == pytest.approx(want[key], rel=F64_REL), f"{where}: {key}"
        for key in ("delta_norm", "theta_norm"):
            assert got[key] == pytest.approx(want[key], rel=F32_REL), f"{where}: {key}"
        assert got["theta_sum"] == pytest.approx(want["theta_sum"], rel=F32_REL, abs=F32_REL * want["theta_norm"]), where


@pytest.mark.timeout(60)
def test_the_scenario_is_bit_identical_from_run_to_run():
    assert syncer_scenario.history() == syncer_scenario.history()
