"""`yeto shape`: plan a fleet in-process (catalog, signals, exact solver) and show it, its rejections and the launch line."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from yeto.cli.launch import island_backend
from yeto.cli.launch.recipe import SEQ_LEN
from yeto.cli.shape_render import render, render_signals
from yeto.infra.model_source import resolve_model
from yeto.schemas.codecs import CODECS

if TYPE_CHECKING:   # the planner imports OR-Tools (~1 s): only a command that plans pays for it
    from yeto.services.planner.api import FleetPlan, PlanRequest


def _csv(text: str | None) -> tuple[str, ...]:
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())


class BudgetPerHour(argparse.Action):
    """--budget-per-hour; the old --budget still works, with a warning: it read as a total, which --max-spend is."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string == "--budget":
            print("yeto: warning: --budget is deprecated; say --budget-per-hour ($/hr; --max-spend caps the total $)",
                  file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_plan_arguments(p: argparse.ArgumentParser, *, include_model: bool = True) -> None:
    """The planner's flags, shared by `yeto shape` and `yeto launch` without --gpu."""
    if include_model:
        p.add_argument("--model", required=True, help="alias (see README), Hugging Face id, or local path")
    p.add_argument("--budget-per-hour", "--budget", dest="budget", type=float, action=BudgetPerHour, metavar="USD",
                   help="$/hr for islands plus head; maximise effective TFLOPs under it (--max-spend caps total $; "
                        "--budget is its old name)")
    p.add_argument("--flops", type=float, help="effective TFLOPs to reach at least cost")
    p.add_argument("--tuning", choices=("lora", "full"), default="lora")
    p.add_argument("--base-quantization", choices=("none", "nf4"), default="none", help="nf4 = QLoRA")
    p.add_argument("--seq-len", type=int, default=SEQ_LEN, help=f"tokens per packed sequence (default {SEQ_LEN})")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--weights-gb", type=float, help="bf16 size of the model in GB (for (Hub) models offline)")
    p.add_argument("--clouds", help="comma-separated clouds allowed (default: all in the catalog)")
    p.add_argument("--regions", help="comma-separated regions allowed")
    p.add_argument("--exclude-regions", help="comma-separated regions denied")
    p.add_argument("--max-islands", type=int, default=16)
    p.add_argument("--spot", dest="spot", action="store_true", default=True, help="spot where sold (default)")
    p.add_argument("--on-demand", dest="spot", action="store_false", help="on-demand capacity only")
    p.add_argument("--price-margin", type=float, default=0.10, help="fraction added to catalog prices")
    p.add_argument("--head-price", type=float, default=0.19, help="$/hr of the on-demand head VM (16 GB; a larger "
                   "head the syncer needs is priced from its type)")
    p.add_argument("--syncers", type=int, metavar="N", help="run the syncer as N processes (the head's, or the local "
                   "stack's when `yeto launch` starts it), each owning fragments p with p %% N == k and 1/N of the "
                   "syncer's memory; default 1, or what the running local stack runs")
    p.add_argument("--head-memory-gb", type=int, metavar="GB", help="RAM of the head VM (default: the smallest head "
                   "type that holds the syncer's memory model with a margin)")
    p.add_argument("--head-nodes", type=int, default=1, metavar="N", help="the run's head over N VMs: 1 (default; "
                   "mirror mode with --output), or 3 to 5, a NATS cluster with streams on every node, so one VM's "
                   "loss loses no event (docs/CLUSTER.md); each VM is priced as the head")
    p.add_argument("--catalog-dir", help="local copy of SkyPilot's catalog (<dir>/<cloud>/vms.csv), for offline use")


def register(sub) -> None:
    p = sub.add_parser("shape", help="plan a fleet for a budget or TFLOPs target, without launching",
                       description="Plan the fleet `yeto launch` would rent when --gpu is omitted.")
    add_plan_arguments(p)
    island_backend.add_arguments(p, launch=False)
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    p.add_argument("--data", help="the training data: estimate the job's hours and cost from its tokens (the model's "
                                  "tokenizer must be local)")
    p.add_argument("--explain-signals", action="store_true", help="also show every live capacity signal the plan read "
                   "(quotas, placement scores, spot prices, stock: value, age, source) and each assumption made "
                   "without one (--json always carries them, as `signals`)")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over --data for the estimate (default 1)")
    p.add_argument("--sync-every", type=int, metavar="H", help="inner steps between two pushes of a fragment, as "
                   "`yeto launch --sync-every`: a fleet whose rounds no head keeps up with at H is refused with the H "
                   "that would; default: 24, raised in the plan (and its launch line) where no head keeps up at it")
    names = ", ".join(CODECS)
    p.add_argument("--codec", help=f"the wire codec both ways, as `yeto launch --codec` (one of {names}; default q4): the "
                   "head's rounds are sized for it, and the launch line carries it")
    p.add_argument("--codec-up", help="the learners' push codec (overrides --codec)")
    p.add_argument("--codec-down", help="the broadcast deltas' codec (overrides --codec)")
    p.add_argument("--fragments", type=int, metavar="N", help="fragments of the model, as `yeto launch --fragments` "
                   "(default 8): the head's rounds are sized for them")
    p.set_defaults(func=run)


def request_from_args(args) -> PlanRequest:
    from yeto.services.planner.api import PlanRequest
    ref = resolve_model(args.model)
    weights = args.weights_gb if args.weights_gb is not None else ref.weights_gb
    if weights is None and ref.hf_id:
        weights = hub_weights_gb(ref.hf_id)
    return PlanRequest(
        model=args.model, weights_gb=weights, budget=args.budget, flops=args.flops, tuning=args.tuning,
        base_quantization=args.base_quantization, seq_len=args.seq_len, micro_batch=args.micro_batch,
        clouds=_csv(args.clouds), regions=_csv(args.regions), exclude_regions=_csv(args.exclude_regions),
        max_islands=args.max_islands, spot=args.spot, price_margin=args.price_margin, head_price=args.head_price,
        num_syncers=args.syncers or 1, head_memory_gb=args.head_memory_gb, head_nodes=args.head_nodes,
        inner_steps=getattr(args, "sync_every", None),
        codec_up=getattr(args, "codec_up", None) or getattr(args, "codec", None),
        codec_down=getattr(args, "codec_down", None) or getattr(args, "codec", None),
        num_fragments=getattr(args, "fragments", None),
        data=getattr(args, "data", None), moe=expert_parallel_config(args))


def expert_parallel_config(args) -> dict | None:
    """The model's config.json when its islands run expert-parallel (--island-backend megatron): the planner sizes
    each GPU as an EP rank from it (services/planner/expert_memory.py); None for every other backend."""
    if getattr(args, "island_backend", None) != "megatron":
        if getattr(args, "megatron_tp", None) is not None:
            raise ValueError("--megatron-tp splits a Megatron-Core island's tensors: add --island-backend megatron, "
                             "or drop it")
        return None
    path = Path(args.model).expanduser() / "config.json"
    if not path.is_file():
        raise ValueError(f"--island-backend megatron plans from the model's config.json: --model {args.model} is not a "
                         f"local model directory with one")
    from yeto.services.planner.api import TP_KEY
    tp = getattr(args, "megatron_tp", None)
    return {**json.loads(path.read_text()), **({TP_KEY: tp} if tp is not None else {})}


def hub_weights_gb(hf_id: str) -> float:
    """bf16 footprint from the Hub's safetensors metadata (network; HF_TOKEN for private repos)."""
    from huggingface_hub import get_safetensors_metadata
    try:
        meta = get_safetensors_metadata(hf_id)
    except Exception as e:  # noqa: BLE001 - offline, gated, or no safetensors: the user can give the size instead
        raise ValueError(f"could not read the size of {hf_id} from the Hugging Face Hub ({type(e).__name__}: {e}); "
                         f"pass --weights-gb with its bf16 size in GB (2 x billions of parameters)") from None
    return sum(meta.parameter_count.values()) * 2 / 1e9


def plan_from_args(args) -> FleetPlan:
    """Build the request from parsed flags, read the catalog, and plan as the planner service does."""
    from yeto.services.planner.api import load_catalog, shape_fleet
    req = request_from_args(args)
    catalog = load_catalog(catalog_dir=args.catalog_dir, clouds=list(req.clouds) or None)
    home = Path(getattr(args, "state_dir", None) or os.environ.get("YETO_HOME") or "~/.yeto").expanduser()
    return shape_fleet(req, catalog, cache_path=home / "cache" / "signals.json", now=time.time())


def job_estimate(args, plan: FleetPlan) -> str:
    """The estimate line: the data's tokens counted as training will count them, with the model's local tokenizer."""
    from yeto.cli.shape_render import estimate
    from yeto.infra.model_source import resolve
    from yeto.learners.data import DataSpec, check_data
    ref, source = resolve_model(args.model), resolve(args.model)
    if not source.is_local or (weights := args.weights_gb or ref.weights_gb) is None:
        return f"Estimate: needs {args.model}'s tokenizer and size on this machine (a local model dir, or --weights-gb)"
    from yeto.learners.torch.api import load_tokenizer
    report = check_data(DataSpec(source=args.data, seq_len=args.seq_len), load_tokenizer(source))
    if not report.ok or report.tokens is None:
        return f"Estimate: --data {args.data} is not usable (`yeto data check --data {args.data}` says why)"
    usd = plan.islands_price_per_hour * (1 + args.price_margin) + plan.head_price_per_hour
    return estimate(report.tokens.num_tokens, args.epochs, weights, plan.total_tflops, args.tuning, usd)


def expert_splits(args, plan: FleetPlan) -> list[str]:
    """With --island-backend megatron: how each distinct island size of the plan runs the MoE (EP x TP)."""
    moe = expert_parallel_config(args)
    if moe is None:
        return []
    from yeto.services.planner.api import describe_split, moe_split
    sizes = sorted({i["count"] * i["nodes"] for i in plan.islands})
    return [f"{n} GPU(s) an island: {describe_split(moe_split(moe), n)}" for n in sizes]


def run(args) -> int:
    from yeto.services.planner.api import CatalogUnavailable
    try:
        plan = plan_from_args(args)
    except CatalogUnavailable as e:     # this machine's condition, not a usage error: exit status 1
        print(f"yeto: error: {e}", file=sys.stderr)
        return 1
    splits = expert_splits(args, plan)
    if args.json:
        print(json.dumps({**plan.to_dict(), **({"expert_splits": splits} if splits else {})}, indent=2))
    elif plan.feasible:
        print(render(plan, args.model, args.price_margin))
        if splits:
            print("\n".join(["Expert parallelism (--island-backend megatron):", *(f"  {s}" for s in splits)]))
        if args.data:
            print(job_estimate(args, plan))
    else:
        for r in plan.rejected:
            print(f"  rejected {r['shape']}: {r['reason']}", file=sys.stderr)
    if args.explain_signals and not args.json:
        print(render_signals(plan.signals))
    if not plan.feasible:
        print(f"yeto shape: {plan.reason}", file=sys.stderr)
        return 1
    return 0
