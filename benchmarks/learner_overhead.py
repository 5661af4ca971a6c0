"""Learner throughput with DiLoCo synchronization on, over the same training with it off (target >= 0.95).

Both arms train the same random-init Llama (LoRA, the default SyncConfig: P=8, H=24, q4 pushes) on the
same pre-built token batches, alternating off/on `--repeats` times; each arm's best run counts (on a
shared machine the least-disturbed run is the truest one). A within-run cross-check divides the on
arm's time outside the step boundary by its total.
The on arm runs DilocoHook over the real SyncerCore through an in-process wire that chunks and
re-parses every push and global exactly as NATS carries them (lib_loopback.py).
The syncer's own work (merge, outer step, broadcast encoding) runs on another machine in a real run,
so its time is measured and excluded from the headline; the raw ratio including it is printed too.

    .venv/bin/python benchmarks/learner_overhead.py [--steps 96] [--repeats 3] [--hidden 256]
"""
from __future__ import annotations

import argparse
import statistics
import time

import lib_loopback
import torch

from yeto.learners.api import accel
from yeto.learners.torch.api import TrainRecipe, apply_tuning, make_hook, train, trainable_parameters
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.api import SyncerCore


def model(args):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                         num_key_value_heads=max(1, args.hidden // 128), max_position_embeddings=args.seq_len)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


class Timed:
    """The sync hook, timing the learner's side of every step boundary."""

    def __init__(self, hook) -> None:
        self.hook, self.seconds = hook, 0.0

    def join(self) -> bool:
        started = time.perf_counter()
        try:
            return self.hook.join()
        finally:
            self.seconds += time.perf_counter() - started

    def after_step(self, step: int, tokens: int) -> bool:
        started = time.perf_counter()
        try:
            return self.hook.after_step(step, tokens)
        finally:
            self.seconds += time.perf_counter() - started


def run_arm(args, recipe: TrainRecipe, batches: list, *, synced: bool) -> tuple[float, float, float, int]:
    """(seconds training, seconds in the step boundary, seconds inside the syncer core, tokens) of one arm."""
    tuned = apply_tuning(model(args), recipe)
    hook, wire = None, None
    if synced:
        config = SyncConfig.from_dict(recipe.sync)
        wire = lib_loopback.Loopback(SyncerCore(config, run_id="bench"))
        hook = Timed(make_hook(tuned, recipe, wire.transport("l0"), run_id="bench", learner="l0", generation=0,
                               join_wait_s=0.0))
    started = time.perf_counter()
    results = train(tuned, iter(batches), recipe, accel=accel.detect(prefer="cpu"), sync=hook)
    elapsed = time.perf_counter() - started
    assert not synced or sum(r.synced for r in results) > 0, "the on arm never applied a global version"
    return elapsed, (hook.seconds if hook else 0.0), (wire.syncer_s if wire else 0.0), sum(r.tokens for r in results)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tuning", choices=("lora", "full"), default="lora")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    recipe = TrainRecipe(model="random-init", tuning=args.tuning, max_steps=args.steps, warmup_steps=5,
                         micro_batch=args.micro_batch,
                         seq_len=args.seq_len, sync=SyncConfig().to_dict())
    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(args.steps):
        ids = torch.randint(0, args.vocab, (args.micro_batch, args.seq_len), generator=gen)
        batches.append({"input_ids": ids, "labels": ids})
    num_trainable = sum(p.numel() for _, p in trainable_parameters(apply_tuning(model(args), recipe)))
    print(f"model: hidden {args.hidden}, {args.layers} layers, {args.tuning} (LoRA r={recipe.lora_r}): "
          f"{num_trainable:,} trainable; "
          f"{args.steps} steps of {args.micro_batch}x{args.seq_len} tokens; sync {SyncConfig().num_fragments} fragments, "
          f"H={SyncConfig().inner_steps}, q4 up")
    off, on, on_raw, within = [], [], [], []
    for repeat in range(args.repeats):
        t_off, _, _, tokens = run_arm(args, recipe, batches, synced=False)
        t_on, t_hook, t_syncer, _ = run_arm(args, recipe, batches, synced=True)
        off.append(tokens / t_off)
        on.append(tokens / (t_on - t_syncer))
        on_raw.append(tokens / t_on)
        within.append(1.0 - (t_hook - t_syncer) / (t_on - t_syncer))
        print(f"repeat {repeat}: off {off[-1]:.0f} tok/s, on {on[-1]:.0f} tok/s (syncer core {t_syncer:.3f} s "
              f"excluded; {on_raw[-1]:.0f} tok/s with it); learner-side step boundary {t_hook - t_syncer:.3f} s "
              f"of {t_on - t_syncer:.2f} s")
    print(f"best tokens/s: off {max(off):.0f}, on {max(on):.0f}; including the in-process syncer core "
          f"{max(on_raw) / max(off):.3f}; within-run share of time outside the step boundary "
          f"{statistics.median(within):.4f}")
    print(f"learner_overhead_ratio={max(on) / max(off):.3f}")


if __name__ == "__main__":
    main()
