"""The recipe `yeto launch` publishes: a typed LaunchRecipe from the resolved flags; flags nothing would read, refused."""
from __future__ import annotations

from typing import Any

from yeto.cli.launch import checks
from yeto.schemas.launch_recipe import RECIPE_VERSION, LaunchRecipe

PLANNER_ONLY = {"budget": "--budget-per-hour", "flops": "--flops", "clouds": "--clouds", "regions": "--regions",
                "exclude_regions": "--exclude-regions", "price_margin": "--price-margin"}
"""Flags that only shape the fleet the planner picks: with --gpu naming the fleet, nothing reads them."""
CLOUD_ONLY = {"head_cloud": "--head-cloud", "head_region": "--head-region", "head_memory_gb": "--head-memory-gb",
              "head_price": "--head-price", "env_from_host": "--env-from-host"}
"""Flags for the run's head VM and its cloud islands: with local islands only, nothing reads them."""
LM_ONLY = {"tuning": "--tuning", "base_quantization": "--base-quantization", "seq_len": "--seq-len",
           "data_format": "--data-format", "on_bad_rows": "--on-bad-rows", "shard": "--shard",
           "activation_checkpointing": "--activation-checkpointing", "lora_dropout": "--lora-dropout", "epochs": "--epochs",
           "eval_data": "--eval-data", "field_map": "--field-map", "train_on": "--train-on", "resume_from": "--resume-from",
           "branch_from": "--branch-from"}
"""Flags only the causal-LM learner reads (learners/torch): a diffusion run's learner (learners/diffusion) has no
such setting, so they are refused with --model-kind diffusion (docs/DIFFUSION.md, what does not work yet)."""


def launch_recipe(args, *, train: dict[str, Any], data_check: dict[str, Any], cloud: bool) -> dict[str, Any]:
    """LaunchRun.recipe: built through the model (ValueError names a bad setting), sent as its wire dict."""
    from yeto.cli.launch import recipe as recipe_flags

    return LaunchRecipe.upcast({
        "recipe_version": RECIPE_VERSION, "train": train, "data_check": data_check, "output": args.output,
        "config": recipe_flags.settings(args),
        "timeouts": {"recover_timeout_s": checks.duration_s(args.recover_timeout, "--recover-timeout"),
                     "heartbeat_timeout_s": checks.duration_s(args.heartbeat_timeout, "--heartbeat-timeout"),
                     "final_ack_timeout_s": checks.duration_s(args.final_ack_timeout, "--final-ack-timeout")},
        "prices": {"head_price_per_hour": args.head_price if cloud else 0.0,   # the budget a refused island's move keeps
                   "budget_per_hour": getattr(args, "budget", None), "price_margin": getattr(args, "price_margin", 0.10)},
        "limits": {"max_steps": args.max_steps, "max_tokens": args.max_tokens,
                   "max_time_s": checks.duration_s(args.max_time, "--max-time"), "max_spend": args.max_spend},
    }).wire()


def refuse_unread(args) -> None:
    """A flag set to anything but its default where nothing would read it: planner-only flags with --gpu (the
    fleet is given), head and cloud flags with local islands only, --external-price without --external-learners,
    --resolution without --model-kind diffusion, LM-only flags with it."""
    from yeto.cli.launch.recipe import _ACTIONS as actions

    if getattr(args, "external_price", 0.0) and not getattr(args, "external_learners", 0):
        raise ValueError("--external-price bills joined learners, and there are none: add --external-learners N, "
                         "or drop --external-price")
    for flag in ("resolution", "height", "width", "frames"):
        if getattr(args, flag, None) is not None and getattr(args, "model_kind", "lm") != "diffusion":
            raise ValueError(f"--{flag} sizes the images of a diffusion run (and its clips): add --model-kind "
                             "diffusion, or drop it")
    lm = [flag for dest, flag in LM_ONLY.items() if dest in actions and getattr(args, dest) != actions[dest].default]
    if getattr(args, "model_kind", "lm") == "diffusion" and getattr(args, "external_learners", 0):
        raise ValueError("--external-learners: `yeto join` runs the causal-LM learner (torch or MLX), not the diffusion "
                         "one; give a diffusion run its islands with --gpu")
    if getattr(args, "model_kind", "lm") == "diffusion" and lm:
        raise ValueError(f"{', '.join(lm)} only reach the causal-LM learner, and a --model-kind diffusion run's learner "
                         f"reads no such setting (docs/DIFFUSION.md): drop {'them' if len(lm) > 1 else 'it'}")
    if not args.gpu:
        return
    local = all(part.strip().startswith("local:") for part in args.gpu.split(","))
    cloud = [flag for dest, flag in CLOUD_ONLY.items() if dest in actions and getattr(args, dest) != actions[dest].default]
    if local and cloud:
        raise ValueError(f"{', '.join(cloud)} only reach the run's head VM and cloud islands, and --gpu {args.gpu} names "
                         f"local islands only: drop {'them' if len(cloud) > 1 else 'it'}")
    given = [flag for dest, flag in PLANNER_ONLY.items() if getattr(args, dest, None) != actions[dest].default]
    if given:
        raise ValueError(f"{', '.join(given)} only shape the fleet the planner picks, and --gpu {args.gpu} names the "
                         f"fleet itself: drop {'them' if len(given) > 1 else 'it'}, or drop --gpu to let the planner pick")
