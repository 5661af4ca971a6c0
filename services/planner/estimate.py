"""How long a run takes and what it costs: before it starts from the planner's throughput model (an island's
effective TFLOPs over the FLOPs of its step), and once its learners report, from the step times they measured.

The one ETA source: `yeto launch` (and `--dry-run`) prints `plan_estimate`; `yeto status RUN`, the dashboard and the
terminal's live view all call `seconds_left(view, now)` (docs/LAUNCH.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from yeto.schemas.head_size import trainable_of
from yeto.schemas.head_throughput import HeadSize, size_head
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.run_view import RunView
from yeto.services.planner.gpus import GPUS, spot_goodput

# Effective TFLOPs per device of a local island, where no datasheet applies. A CPU island trains in f32 on its share
# of the cores: SmolLM2-135M LoRA at --seq-len 256 ran ~7 s a step with two islands on this repository's 2-core box
# (256 tokens x 4 x 135M FLOPs / 7 s = 0.02 TFLOPs). A local CUDA device of unknown model: an A10-class guess. A local
# Ascend NPU: a guess too (an Ascend 910B's vendor-quoted ~300 dense bf16 TFLOPs at 0.3 MFU; nothing measured here).
LOCAL_TFLOPS = {"cpu": 0.02, "cuda": 40.0, "npu": 90.0}
# Seconds from `yeto launch` to the first optimizer step: the local stack and learners (BENCHMARK_RESULTS claim 13:
# 27.3 s), or a cloud head VM and spot islands provisioning (an assumption: SkyPilot's usual minutes).
START_S = {"local": 30.0, "cloud": 900.0}


@dataclass(frozen=True)
class Estimate:
    """The expected wall time from launch to the end and its cost; `seconds` None when no limit ends the run."""

    seconds: float | None
    price_per_hour: float
    step_s: float
    basis: str

    @property
    def usd(self) -> float | None:
        return None if self.seconds is None else self.seconds / 3600 * self.price_per_hour

    def render(self) -> str:
        rate = f"${self.price_per_hour:.2f}/hr"
        if self.seconds is None:
            return f"Estimate: no --max-steps, --max-tokens or --max-time ends this run: it costs {rate} until `yeto down`"
        return (f"Estimate: ~{clock(self.seconds)} from launch to the artifact, ${self.usd:.2f} at {rate} "
                f"({self.basis}; `yeto status RUN` corrects it from the measured steps)")


def clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min {s:02d} s"


def flops_per_token(weights_gb: float, tuning: str) -> float:
    """6 FLOPs per parameter and token for full fine-tuning, 4 for LoRA (no weight gradients of the base)."""
    return (6.0 if tuning == "full" else 4.0) * weights_gb * 1e9 / 2


def island_tflops(entry: dict[str, Any]) -> float:
    """An island's effective TFLOPs: datasheet peak x MFU (x spot goodput) for a known GPU, else LOCAL_TFLOPS."""
    devices = entry.get("count", 1) * entry.get("nodes", 1)
    spec = GPUS.get(str(entry["gpu"]).upper())
    if spec is None or spec.peak_bf16_tflops <= 0:
        return devices * LOCAL_TFLOPS.get(str(entry["gpu"]).lower(), LOCAL_TFLOPS["cuda"])
    goodput = spot_goodput(entry["cloud"]) if entry.get("spot") else 1.0
    return devices * spec.peak_bf16_tflops * spec.mfu * goodput


def step_seconds(tokens_per_step: float, per_token: float, entry: dict[str, Any]) -> float:
    """One inner step of an island: every rank steps over `tokens_per_step`, so a step's time is its FLOPs over one
    device's effective TFLOPs, whatever the island's size."""
    return tokens_per_step * per_token / (island_tflops(entry) / (entry.get("count", 1) * entry.get("nodes", 1)) * 1e12)


def fleet_rounds(weights_gb: float, tuning: str, tokens_per_step: float, fleet: list[dict[str, Any]],
                 sync: SyncConfig) -> HeadSize:
    """The head's rounds for a fleet (schemas/head_throughput.py): the interval is H inner steps of its slowest island
    at this module's step time, the numbers the ETA uses. `yeto shape` (services/planner/plan.py) and `yeto launch
    --gpu` (yeto/cli/launch/cloud.py) size the head with it."""
    step_s = max(step_seconds(tokens_per_step, flops_per_token(weights_gb, tuning), e) for e in fleet)
    return size_head(trainable_of(weights_gb, tuning), fragments=sync.num_fragments, learners=len(fleet),
                     codec_up=sync.codec_up, codec_down=sync.codec_down, interval_s=sync.inner_steps * step_s)


def plan_estimate(fleet: list[dict[str, Any]], recipe: LaunchRecipe, *, weights_gb: float | None) -> Estimate | None:
    """The run's time and cost before it starts; None when the model's size is unknown here (--weights-gb)."""
    if weights_gb is None or not fleet:
        return None
    t, limits = recipe.train, recipe.limits
    per_token = flops_per_token(weights_gb, t.tuning)
    step_s = max(step_seconds(t.tokens_per_step, per_token, e) for e in fleet)
    start = START_S["local" if all(e.get("cloud") == "local" for e in fleet) else "cloud"]
    ends = [steps * step_s for steps in [max_steps(recipe)] if steps]
    if limits.max_tokens:
        ends.append(limits.max_tokens * per_token / (sum(island_tflops(e) for e in fleet) * 1e12))
    if limits.max_time_s:
        ends.append(limits.max_time_s - start)
    price = sum(e.get("price_per_hour") or 0.0 for e in fleet) + recipe.prices.head_price_per_hour
    basis = (f"planned: {t.tokens_per_step * (per_token / 1e9):,.0f} GFLOPs a step over "
             f"{min(island_tflops(e) for e in fleet):.3g} effective TFLOPs, {start:.0f} s to start")
    return Estimate(start + min(ends) if ends else None, price, step_s, basis)


def model_weights_gb(model: str) -> float | None:
    """The model's bf16 size when the alias table or its local files tell it (no network), else None."""
    from yeto.infra.model_source import resolve_model
    try:
        return resolve_model(model).weights_gb
    except ValueError:
        return None


def max_steps(recipe: LaunchRecipe) -> int | None:
    """--max-steps from a recipe: its limits, else its train section's (where the recipe gives one)."""
    return recipe.limits.max_steps or (recipe.train.max_steps if "max_steps" in recipe.train.model_fields_set else None)


def learner_seconds_left(max_steps: int, step: int, step_time_s: float) -> float:
    """One learner's steps left at its measured pace (the live view's bar per learner shows it)."""
    return max(0, max_steps - step) * step_time_s


def seconds_left(view: RunView, now: datetime, *, weights_gb: float | None = None) -> float | None:
    """Seconds until the run ends: the slowest learner's steps left at its measured step time once learners report,
    the plan's time less the time since launch before; capped by --max-time; None when nothing says."""
    if view.launched_at is None or view.ended:
        return None
    recipe = LaunchRecipe.upcast(view.recipe)
    elapsed = (now - view.launched_at).total_seconds()
    steps, measured = max_steps(recipe), [lr for lr in view.learners.values() if lr.step_time_s]
    ends: list[float] = []
    if steps and measured:
        ends.append(max(learner_seconds_left(steps, lr.step, lr.step_time_s) for lr in measured))   # the slowest ends it
    elif (planned := plan_estimate(list(view.fleet), recipe, weights_gb=weights_gb or model_weights_gb(recipe.train.model))
          ) and planned.seconds is not None:
        ends.append(planned.seconds - elapsed)
    if recipe.limits.max_tokens and view.num_tokens and elapsed > 0:
        ends.append((recipe.limits.max_tokens - view.num_tokens) * elapsed / view.num_tokens)
    if recipe.limits.max_time_s:
        ends.append(recipe.limits.max_time_s - elapsed)
    return max(0.0, min(ends)) if ends and not math.isnan(min(ends)) else None
