"""Build the MLX learner: the pinned model directory loaded into MLX with seeded LoRA, and its tokenizer."""
from __future__ import annotations

import mlx.core as mx

from yeto.infra.source_pins import check_data_pin, pinned_source
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.mlx import model as mlx_model
from yeto.learners.mlx.lora import apply_lora

_DTYPES = {"auto": mx.float32, "f32": mx.float32, "bf16": mx.bfloat16}


def build(recipe: TrainRecipe, *, device: str | None = None) -> tuple[mlx_model.CausalLM, object]:
    """The model with LoRA applied, and its tokenizer. Only LoRA on a local safetensors directory is built here."""
    if recipe.tuning != "lora" or recipe.base_quantization != "none":
        raise ValueError("the MLX learner trains LoRA on an unquantized base: use tuning lora, base_quantization none "
                         "(or --backend torch)")
    if device is not None:
        mx.set_default_device(mx.cpu if device == "cpu" else mx.gpu)
    source = pinned_source(recipe.model, recipe.pins.get("base"))    # what launch pinned, or a refusal (exit 2)
    check_data_pin(recipe.data, recipe.pins.get("data"))
    from transformers import AutoTokenizer  # tokenizers only: transformers needs no torch for this
    tokenizer = AutoTokenizer.from_pretrained(source.location, revision=source.revision)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = mlx_model.load(_local_dir(source), dtype=_DTYPES[recipe.dtype])
    apply_lora(model, r=recipe.lora_r, alpha=recipe.lora_alpha, seed=recipe.seed, targets=recipe.target_modules)
    return model, tokenizer


def _local_dir(source) -> str:
    if source.gguf_file is not None:
        raise ValueError(f"the MLX learner reads safetensors model directories, not {source.gguf_file}")
    from pathlib import Path
    if Path(source.location).is_dir():
        return source.location
    from huggingface_hub import snapshot_download  # an HF id: the Hub cache (offline with HF_HUB_OFFLINE=1)
    return snapshot_download(source.location, revision=source.revision, allow_patterns=["*.json", "*.safetensors"])
