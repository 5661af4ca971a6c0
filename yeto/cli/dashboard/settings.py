"""The dashboard's config panel: a run's settings as names and numbers, and how each learner runs (pure)."""
from __future__ import annotations

from typing import Any

from yeto.schemas.launch_recipe import LaunchRecipe

CONFIG_KEYS = ("tuning", "lora_r", "lora_alpha", "lr", "schedule", "warmup_steps", "max_steps", "micro_batch",
               "grad_accum", "seq_len", "dtype", "base_quantization", "shard", "clip_norm", "seed")


def config(recipe: dict[str, Any], how: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's settings a page shows beside its curves: names and numbers only (a local model's folder name, never
    its path; no data path, no output, no credentials), and how each learner runs."""
    r = LaunchRecipe.upcast(recipe)
    train = r.train.model_dump()
    model = str(train.get("model") or r.config.get("model") or "")
    if model.startswith(("/", "~", ".")):
        model = model.rstrip("/").rsplit("/", 1)[-1]
    settings = {"model": model, "model_kind": r.model_kind, **{k: train.get(k) for k in CONFIG_KEYS},
                "inner_steps": (train.get("sync") or {}).get("inner_steps")}
    return {"settings": {k: v for k, v in settings.items() if v not in (None, "")}, "learners": how}
