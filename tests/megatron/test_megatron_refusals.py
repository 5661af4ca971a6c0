"""What the megatron backend does not do is refused by name: at `yeto launch`, in the learner process (exit 2 with
one error line), and for what only CUDA runs (TransformerEngine, the all-to-all dispatcher, grouped GEMM); LoRA
beyond the attention projections, with dropout or with TP among them."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from yeto.cli.launch import island_backend
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.megatron import host
from yeto.learners.megatron.backend import check_recipe
from yeto.learners.megatron.model import Shape
from yeto.schemas.launch_recipe import LaunchRecipe

pytest.importorskip("megatron.core")


def launch_args(**given):
    return SimpleNamespace(**{"island_backend": "megatron", "model_kind": "lm", "tuning": "full",
                              "external_learners": 0, "base_quantization": "none", **given})


def test_the_launch_recipe_names_the_megatron_learner_module():
    recipe = island_backend.apply(launch_args(), {"recipe_version": 2})
    assert LaunchRecipe.upcast(recipe).learner_module == "yeto.learners.megatron"
    assert LaunchRecipe.upcast({"recipe_version": 2}).learner_module == "yeto.learners.torch"
    assert island_backend.apply(launch_args(island_backend=None), {"a": 1}) == {"a": 1}


@pytest.mark.parametrize(("given", "said"), [
    ({"base_quantization": "nf4", "tuning": "lora"}, "--base-quantization nf4 is not built"),
    ({"tuning": "lora", "megatron_tp": 2, "gpu": "local:2xcpu"}, "LoRA with --megatron-tp is not built"),
    ({"tuning": "lora", "lora_dropout": 0.1}, "--lora-dropout 0.1 is not built"),
    ({"model_kind": "diffusion"}, "not with --model-kind diffusion"),
    ({"external_learners": 1}, "--external-learners join with")])
def test_launch_refuses_what_megatron_islands_do_not_train(given, said):
    with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)")):
        island_backend.apply(launch_args(**given), {})


@pytest.mark.parametrize(("change", "said"), [({"tuning": "lora", "target_modules": ("w2",)}, "module\\(s\\) w2 are not"),
                                              ({"base_quantization": "nf4", "tuning": "lora"}, "base_quantization"),
                                              ({"tuning": "lora", "tensor_parallel": 2}, "LoRA with tensor paral"),
                                              ({"tuning": "lora", "lora_dropout": 0.1}, "lora_dropout 0.1 is not"),
                                              ({"shard": "fsdp"}, "shard fsdp is not supported"),
                                              ({"dtype": "bf16"}, "dtype 'bf16' is not supported"),
                                              ({"activation_checkpointing": "on"}, "activation_checkpointing on")])
def test_the_learner_refuses_recipe_settings_it_would_ignore(change, said):
    with pytest.raises(ValueError, match=said):
        check_recipe(TrainRecipe(model="m", **{"tuning": "full", **change}))


def test_a_checkpoint_other_than_mixtral_is_refused_by_model_type():
    from transformers import LlamaConfig
    with pytest.raises(ValueError, match="model_type 'llama' is not supported; it converts mixtral"):
        Shape.of(LlamaConfig())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusals are of a host without CUDA")
@pytest.mark.parametrize("feature", sorted(host.CUDA_ONLY))
def test_cuda_only_features_are_refused_by_name_on_the_cpu(feature):
    with pytest.raises(ValueError, match=f"megatron backend: {feature} is refused on this host"):
        host.refuse_cuda_only(feature)


def test_the_learner_process_exits_2_with_one_error_line_on_lora_beyond_attention(tmp_path):
    recipe = TrainRecipe(model=str(tmp_path), data="d.jsonl", tuning="lora", target_modules=("w1",)).to_json()
    done = subprocess.run([sys.executable, "-m", "yeto.learners.megatron", "--run-id", "r", "--learner", "l",
                           "--recipe", recipe, "--no-sync"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: megatron backend: LoRA target module(s) w1 are not built" in done.stderr


@pytest.mark.parametrize(("given", "said"), [
    ({"island_backend": None}, "--megatron-tp splits a Megatron-Core island's tensors: add --island-backend megatron "
                               "(the torch backend"),
    ({"island_backend": "torch"}, "add --island-backend megatron"),
    ({"megatron_tp": 0}, "--megatron-tp 0: must be at least 1"),
    ({"megatron_tp": 2, "gpu": "local:2xcpu,local:3xcpu"}, "--megatron-tp 2 does not divide the 3 rank"),
])
def test_launch_refuses_tensor_parallelism_it_cannot_run(given, said):
    with pytest.raises(ValueError, match=said.replace("(", r"\(")):
        island_backend.apply(launch_args(**{"megatron_tp": 2, "gpu": "local:2xcpu", **given}),
                             {"train": {"tuning": "full"}})


def test_the_tensor_parallelism_reaches_the_train_section_of_the_launch_recipe():
    recipe = island_backend.apply(launch_args(megatron_tp=2, gpu="local:2xcpu,local:4xcpu"), {"train": {"lr": 1.0}})
    assert recipe["train"] == {"lr": 1.0, "tensor_parallel": 2} and recipe["island_backend"] == "megatron"


def test_backends_without_tensor_parallelism_refuse_a_recipe_that_asks_for_it():
    from yeto.learners.torch.backend import TorchBackend
    text = TrainRecipe(model="m", tensor_parallel=2).to_json()
    with pytest.raises(ValueError, match="torch backend: tensor_parallel 2 is the megatron backend's"):
        TorchBackend().load_recipe(text)
    assert TorchBackend().load_recipe(TrainRecipe(model="m").to_json()).tensor_parallel == 1


def test_a_model_whose_heads_or_experts_do_not_split_is_refused_by_name():
    from transformers import MixtralConfig

    from yeto.learners.megatron.model import check_split
    shape = Shape.of(MixtralConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                   intermediate_size=96))
    check_split(shape, expert_parallel=2, tensor_parallel=2)
    with pytest.raises(ValueError, match="key/value heads 2 do not split over tensor parallelism 4"):
        check_split(shape, expert_parallel=1, tensor_parallel=4)
    with pytest.raises(ValueError, match="4 experts do not split over expert parallelism 3"):
        check_split(shape, expert_parallel=3, tensor_parallel=1)
