"""What a learner trains: LoRA adapters (seeded, identical on every island) or every weight."""
from __future__ import annotations

import torch

from yeto.learners.lm_recipe import TrainRecipe

# Attention and MLP projections per architecture: adapting all of them tunes better than q/v only.
_LLAMA_LIKE = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TARGET_MODULES: dict[str, tuple[str, ...]] = {
    **{arch: _LLAMA_LIKE for arch in (
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
        "gemma3_text", "olmo", "olmo2", "granite", "smollm3", "deepseek_v3", "glm4")},
    "phi3": ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
    "gpt2": ("c_attn", "c_proj", "c_fc"),
    "gpt_neox": ("query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"),
    "falcon": ("query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"),
}


def target_modules(model: torch.nn.Module, recipe: TrainRecipe) -> tuple[str, ...] | str:
    """The recipe's modules, else the architecture's table entry, else peft's "all-linear"."""
    if recipe.target_modules:
        return recipe.target_modules
    return TARGET_MODULES.get(getattr(model.config, "model_type", ""), "all-linear")


def apply_tuning(model: torch.nn.Module, recipe: TrainRecipe) -> torch.nn.Module:
    """Make the recipe's parameters trainable. Call with the model on the CPU: LoRA's random init is
    drawn from the CPU generator seeded with the run's seed, so every island starts bit-identical."""
    # peft creates each adapter on the CPU before moving it beside its base layer, so an NF4 base already on
    # its device (quantized while loading) still gets CPU-seeded, bit-identical adapters.
    assert next(model.parameters()).device.type in ("cpu", "meta") or getattr(model, "is_loaded_in_4bit", False), \
        "initialize adapters on the CPU"
    if recipe.tuning == "full":
        for param in model.parameters():
            param.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model
    config = LoraConfig(
        r=recipe.lora_r, lora_alpha=recipe.lora_alpha, lora_dropout=recipe.lora_dropout,
        target_modules=list(t) if isinstance(t := target_modules(model, recipe), tuple) else t,
        bias="none", task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        return get_peft_model(model, config)


def trainable_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """The trainable (name, parameter) pairs, sorted by name: the set diloco_sync fragments."""
    return sorted(((n, p) for n, p in model.named_parameters() if p.requires_grad), key=lambda np_: np_[0])


def state_hash(model: torch.nn.Module) -> str:
    """SHA-256 over the trainable parameters' names and bytes (to prove islands start identical)."""
    import hashlib
    digest = hashlib.sha256()
    for name, param in trainable_parameters(model):
        digest.update(name.encode())
        digest.update(param.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()
