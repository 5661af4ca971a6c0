"""The head's throughput model (schemas/head_throughput.py): how a round's modelled time grows, and the head it
sizes for a fleet. The rates themselves are measured by benchmarks/head_rates.py (docs/HEAD.md), not here."""
from __future__ import annotations

import pytest

from yeto.schemas import head_throughput as throughput


def _round(values: int, **kw) -> float:
    args = dict(learners=4, codec_up="q4", codec_down="q4", cores=1) | kw
    return throughput.round_seconds(values, **args)


def test_a_round_grows_with_values_and_learners_and_shrinks_with_cores_up_to_the_memory_bound():
    assert _round(2 << 20) == pytest.approx(2 * _round(1 << 20), rel=1e-3)
    fold_only = throughput.Rates(ingest={"q4": (0.0, 1e-9)}, sha256_per_byte=0.0, step_per_value=0.0,
                                 step_per_value_row=0.0, broadcast={"q4": 0.0}, copy_per_value_row=0.0,
                                 gram_pass_per_value_pair=None)       # the pass at the fold's rate
    eight, four = (_round(1 << 20, learners=m, rates=fold_only) for m in (8, 4))
    assert eight / four == pytest.approx(44 / 14)                 # the Gram rows folded grow as M (M + 3) / 2
    assert _round(1 << 20, learners=8) > _round(1 << 20, learners=4)
    assert _round(1 << 20, cores=2) == pytest.approx(_round(1 << 20) / (1 + throughput.EFFICIENCY))
    most = throughput.MAX_USEFUL_CORES
    assert _round(1 << 20, cores=4 * most) == _round(1 << 20, cores=most) < _round(1 << 20, cores=most - 1)
    assert _round(1 << 20, codec_up="topk2") != _round(1 << 20)               # each codec its own measured rate


def test_the_merges_gram_pass_pays_its_pairs_at_its_own_rate_and_a_sparse_push_folds_as_it_comes():
    none = dict(sha256_per_byte=0.0, step_per_value=0.0, step_per_value_row=0.0, copy_per_value_row=0.0)
    pass_only = throughput.Rates(ingest={"q4": (0.0, 0.0)}, broadcast={"q4": 0.0}, gram_pass_per_value_pair=1e-9, **none)
    for m in (1, 4, 8):                                       # b with each push and the pushes with each other
        assert _round(1 << 20, learners=m, rates=pass_only) == pytest.approx((1 << 20) * 1e-9 * m * (m + 1) / 2)
    fold_only = throughput.Rates(ingest={"topk4": (0.0, 1e-9)}, broadcast={"q4": 0.0}, gram_pass_per_value_pair=5e-9,
                                 **none)
    assert _round(1 << 20, codec_up="topk4", rates=fold_only) == pytest.approx((1 << 20) * 1e-9 * 14)   # k + 2, no pass


def test_the_head_is_the_fewest_cores_whose_rounds_fit_the_interval():
    one = _round(1 << 24, cores=1)
    size = throughput.size_head(8 << 24, fragments=8, learners=4, codec_up="q4", codec_down="q4", interval_s=100 * one)
    assert size.fits and size.total_cores == 1 and size.busy_s == pytest.approx(8 * one)   # 8 rounds in half of 100
    tight = throughput.size_head(8 << 24, fragments=8, learners=4, codec_up="q4", codec_down="q4", interval_s=4 * one)
    assert tight.fits and tight.busy_s <= tight.margin * tight.interval_s
    smaller = [(i, c) for i in range(1, 9) for c in range(1, throughput.MAX_USEFUL_CORES + 1) if i * c < tight.total_cores]
    for instances, cores in smaller:                                         # nothing with fewer cores fits
        busy = -(-8 // instances) * _round(1 << 24, cores=cores)
        assert busy > tight.margin * tight.interval_s, (instances, cores)


def test_a_fleet_no_head_can_serve_is_refused_with_the_numbers():
    size = throughput.size_head(8_030_000_000, fragments=8, learners=4, codec_up="q4", codec_down="q4", interval_s=0.01)
    assert not size.fits and size.instances == 8 and size.cores == throughput.MAX_USEFUL_CORES
    assert "0.01 s interval" in size.reason and "learners would wait" in size.reason and f"{size.busy_s:.3g} s" in size.reason
    with pytest.raises(ValueError, match="margin"):
        throughput.size_head(1 << 20, fragments=1, learners=1, codec_up="q4", codec_down="q4", interval_s=1.0, margin=0)
