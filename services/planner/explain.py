"""What a plan tells the user besides its numbers: the `yeto launch` line to run, or why no fleet fits (pure)."""
from __future__ import annotations

from yeto.services.planner.candidates import Candidate
from yeto.services.planner.request import PlanRequest


def launch_line(req: PlanRequest, gpu: str, *, sync_every: int | None = None, syncers: int | None = None) -> str:
    """The `yeto launch` line of a plan; `sync_every`: the H the planner raised so the head keeps up (else the
    request's own --sync-every, if any); `syncers`: the syncer processes the head's rounds need (--syncers where
    more than the request's)."""
    parts = ["yeto launch", f"--model {req.model}", f"--gpu {gpu}", f"--data {req.data or '<DATA>'}"]
    defaults = PlanRequest(model=req.model, budget=1.0)
    for flag, attr in (("--tuning", "tuning"), ("--base-quantization", "base_quantization"),
                       ("--seq-len", "seq_len"), ("--micro-batch", "micro_batch")):
        if getattr(req, attr) != getattr(defaults, attr):
            parts.append(f"{flag} {getattr(req, attr)}")
    if req.moe is not None:
        parts.append("--island-backend megatron")
        if (tp := req.moe.get("megatron_tp", 1)) != 1:     # expert_memory.TP_KEY: yeto shape --megatron-tp
            parts.append(f"--megatron-tp {tp}")
    if not req.spot:
        parts.append("--on-demand")
    if req.head_nodes != 1:
        parts.append(f"--head-nodes {req.head_nodes}")
    if (n := max(syncers or 1, req.num_syncers)) != 1:
        parts.append(f"--syncers {n}")
    if (h := sync_every if sync_every is not None else req.inner_steps) is not None:
        parts.append(f"--sync-every {h}")
    if req.codec_up is not None and req.codec_up == req.codec_down:
        parts.append(f"--codec {req.codec_up}")
    else:
        parts += [f"--{flag} {name}" for flag, name in (("codec-up", req.codec_up), ("codec-down", req.codec_down)) if name]
    if req.num_fragments is not None:
        parts.append(f"--fragments {req.num_fragments}")
    return " ".join(parts)



def why_not(req: PlanRequest, cheapest: Candidate | None) -> str:
    if cheapest is None:
        return (f"no offering in the catalog can hold {req.model} within the filters (see rejected shapes); "
                f"try --tuning lora --base-quantization nf4, a smaller --seq-len, or more clouds and regions")
    cost = cheapest.price * (1 + req.price_margin) + req.head_price
    name = f"{cheapest.label()} at ${cheapest.price:.2f}/hr (+{req.price_margin:.0%} margin, + head ${req.head_price:.2f}/hr)"
    if req.budget is not None and req.flops is None:
        return (f"budget ${req.budget:.2f}/hr fits no island: the cheapest option is {name} = ${cost:.2f}/hr; "
                f"raise --budget-per-hour to at least {cost:.2f}")
    return (f"no fleet reaches {req.flops:g} effective TFLOPs within the limits (budget, --max-islands, stock, quotas); "
            f"the cheapest option is {name} with {cheapest.tflops:.0f} TFLOPs")
