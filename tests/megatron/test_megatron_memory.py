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


def test_tensor_parallelism_divides_each_gpus_state_and_the_island_runs_ep_x_tp():
    from yeto.services.planner.expert_memory import TP_KEY, describe_split, island_fit, island_split
    split, tp2 = moe_split(MIXTRAL_8X7B), moe_split({**MIXTRAL_8X7B, TP_KEY: 2})
    w = Workload(weights_gb=1.0, tuning="full", seq_len=2048)
    assert tp2.tensor_parallel == 2 and tp2.total == split.total
    one, two = expert_parallel_need(split, 4, w), expert_parallel_need(tp2, 4, w)
    assert two.state_gb == pytest.approx(one.state_gb / 2)         # 4 EP groups of 2 GPUs: half of each group's state
    assert two.activations_gb == one.activations_gb                # not divided: an upper bound
    assert island_split(tp2, 16) == (8, 2) and island_split(split, 16) is None      # 16 GPUs, 8 experts: TP 2 only
    assert island_fit(w, split, 16, 141.0) == (False, None)
    assert island_fit(w, tp2, 16, 141.0)[1] == expert_parallel_need(tp2, 8, w)
    assert describe_split(tp2, 8) == "EP 4 x TP 2: 2 expert(s) a group, each group's tensors split over 2 GPU(s)"
    assert describe_split(split, 8) == "EP 8 x TP 1: 1 expert(s) a group (one GPU each)"
    with pytest.raises(ValueError, match="--megatron-tp 3: the model's attention heads \\(32\\) do not split over it"):
        moe_split({**MIXTRAL_8X7B, TP_KEY: 3})


def test_yeto_shape_says_each_islands_ep_x_tp_split_and_the_launch_line_carries_the_tp(tmp_path, capsys):
    from yeto.cli.main import main
    from yeto.services.planner.catalog import FIXTURE_DIR
    half = {**MIXTRAL_8X7B, "num_hidden_layers": 16}
    model = tmp_path / "mixtral"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "mixtral", **half}))
    argv = ["--state-dir", str(tmp_path / "state"), "shape", "--model", str(model), "--budget-per-hour", "200",
            "--tuning", "full", "--seq-len", "2048", "--on-demand", "--catalog-dir", str(FIXTURE_DIR),
            "--clouds", "aws", "--head-memory-gb", "16384", "--island-backend", "megatron"]
    assert main([*argv, "--megatron-tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "Expert parallelism (--island-backend megatron):" in out and " x TP 2: " in out, out
    assert "--island-backend megatron --megatron-tp 2" in out
    assert main([*argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["expert_splits"] and all(" x TP 1: " in s for s in plan["expert_splits"])
    assert "--megatron-tp" not in plan["launch_command"]
    assert main([*argv[:-2], "--megatron-tp", "2"]) == 2
    assert "--megatron-tp splits a Megatron-Core island's tensors: add --island-backend megatron" in capsys.readouterr().err
