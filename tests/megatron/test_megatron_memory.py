"""The planner's memory model of an expert-parallel island: parameters split exactly as the tiny Mixtral counts
them, each rank's state holding the dense tensors and 1/EP of the experts."""
from __future__ import annotations

import json

import pytest

from yeto.schemas.memory_model import Workload
from yeto.services.planner.expert_memory import expert_parallel_need, experts_per_rank, moe_split

MIXTRAL_8X7B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}


def test_the_split_counts_the_tiny_mixtrals_parameters(tmp_path):
    from yeto.learners.megatron.tiny import tiny_moe
    model = tiny_moe(29)
    model.save_pretrained(tmp_path)
    split = moe_split(json.loads((tmp_path / "config.json").read_text()))
    assert split.total == sum(p.numel() for p in model.parameters())
    assert split.per_expert * split.experts == sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)


def test_mixtral_8x7b_counts_46_7b_parameters_and_12_9b_active():
    split = moe_split(MIXTRAL_8X7B)
    assert split.total / 1e9 == pytest.approx(46.7, abs=0.1)       # Mistral's published 46.7B total, 12.9B active
    assert split.active / 1e9 == pytest.approx(12.9, abs=0.1)


def test_each_expert_parallel_rank_holds_the_dense_state_and_its_share_of_the_experts():
    split, w = moe_split(MIXTRAL_8X7B), Workload(weights_gb=1.0, tuning="full", seq_len=2048)
    one, eight = expert_parallel_need(split, 1, w), expert_parallel_need(split, 8, w)
    assert experts_per_rank(split, 8) == 1
    assert one.state_gb == pytest.approx(split.total * 16 / 1e9)
    assert eight.state_gb == pytest.approx((split.dense + split.per_expert) * 16 / 1e9)
    assert one.activations_gb == eight.activations_gb > 0
    with pytest.raises(ValueError, match="8 experts do not split over expert parallelism 3"):
        expert_parallel_need(split, 3, w)
    with pytest.raises(ValueError, match="no num_local_experts"):
        moe_split({k: v for k, v in MIXTRAL_8X7B.items() if k != "num_local_experts"})
