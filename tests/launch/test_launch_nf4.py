"""`yeto launch --base-quantization nf4` refuses, before anything starts, islands that cannot run QLoRA (with
what to do), and otherwise carries nf4 (and --shard) into the learners' train recipe."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_chat_jsonl, write_model_dir
from yeto.cli.launch import checks
from yeto.cli.launch.command import build_launch
from yeto.cli.main import build_parser, main
from yeto.schemas.gpuspec import parse_gpu

pytestmark = pytest.mark.timeout(60)
FIT = dict(weights_gb=16.0, tuning="lora", base_quantization="nf4", seq_len=1024, micro_batch=1)


@pytest.fixture
def no_bitsandbytes(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))


def test_nf4_on_amd_islands_is_refused_naming_what_to_do():
    with pytest.raises(ValueError, match=r"runpod:8xmi300x: --base-quantization nf4 needs bitsandbytes.*NVIDIA GPU"):
        checks.check_memory_fit(parse_gpu("runpod:8xmi300x"), **FIT)
    checks.check_memory_fit(parse_gpu("runpod:8xmi300x"), **{**FIT, "base_quantization": "none"})
    checks.check_memory_fit(parse_gpu("aws:1xh100"), **FIT)


def test_nf4_on_local_islands_without_bitsandbytes_is_refused_before_a_stack_starts(capsys, tmp_path, no_bitsandbytes):
    model, data = write_model_dir(tmp_path / "model"), write_chat_jsonl(tmp_path / "chat.jsonl", 40)
    code = main(["--state-dir", str(tmp_path / "state"), "launch", "--gpu", "local:1xcpu", "--model", str(model),
                 "--data", str(data), "--base-quantization", "nf4"])
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'yeto[qlora]'" in err and "local:1xcpu" in err, err
    assert not (tmp_path / "state" / "stack.json").exists()            # nothing was started


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes not installed")
def test_nf4_and_the_shard_mode_reach_the_learners_recipe(tmp_path):
    model, data = write_model_dir(tmp_path / "model"), write_chat_jsonl(tmp_path / "chat.jsonl", 40)
    argv = ["launch", "--gpu", "local:2xcpu", "--model", str(model), "--data", str(data), "--seq-len", "64",
            "--base-quantization", "nf4", "--shard", "ddp"]
    checks.check_memory_fit(parse_gpu("local:2xcpu"), **FIT)
    cmd = build_launch(build_parser().parse_args(argv), "r-nf4", [])
    assert cmd.recipe["train"]["base_quantization"] == "nf4" and cmd.recipe["train"]["shard"] == "ddp"
    with pytest.raises(ValueError, match="shard ddp or auto"):       # an NF4 base is replicated, never FSDP-sharded
        build_launch(build_parser().parse_args(argv[:-1] + ["fsdp"]), "r-nf4", [])
