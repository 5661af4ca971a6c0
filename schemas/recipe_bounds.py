"""Hard caps on the train recipe's numbers, checked by `yeto launch` before anything starts and again wherever a recipe is
parsed (TrainSection's validator: the launcher refuses a LaunchRun over them as a MessageRejected, never spawns it).

A number over its cap is no training anyone means: `--lora-r 100000000` asked a learner for 25.6 GB of adapters and it
crash-looped. The caps sit far above every recipe in use (docs/SECURITY.md, "Limits and input"); what fits a given
GPU is the memory model's business (docs/MEMORY_MODEL.md, `yeto launch`'s check of cloud GPUs).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple


class Cap(NamedTuple):
    most: int
    flag: str
    usual: str


CAPS: Final = {
    "lora_r": Cap(4096, "--lora-r", "ranks of 8 to 256 are usual"),
    "lora_alpha": Cap(1 << 16, "--lora-alpha", "alpha is usually one to two times the rank"),
    "seq_len": Cap(1 << 17, "--seq-len", "128k tokens is the longest context a run takes"),
    "micro_batch": Cap(1 << 12, "--micro-batch", "raise --grad-accum instead for a larger batch"),
    "grad_accum": Cap(1 << 14, "--grad-accum", "a larger batch comes from more islands or a longer sequence"),
    "max_steps": Cap(10 ** 8, "--max-steps", "bound a long run by --max-tokens, --max-time or --max-spend"),
    "warmup_steps": Cap(10 ** 8, "--warmup-steps", "warm-up is a fraction of --max-steps"),
    "start_step": Cap(10 ** 8, "--resume-from", "the step a resumed run starts at"),
    "eval_every": Cap(10 ** 8, "--eval-every", "0 turns evaluation off"),
}
MAX_MICRO_TOKENS: Final = 1 << 20   # seq_len x micro_batch: tokens in one forward pass, whose activations a GPU holds


def check_bounds(values: Mapping[str, Any]) -> None:
    """ValueError saying what to change when a number in `values` (recipe keys; None or absent: not given) is over its
    cap, or seq_len x micro_batch is over MAX_MICRO_TOKENS."""
    for key, cap in CAPS.items():
        value = values.get(key)
        if isinstance(value, int) and value > cap.most:
            raise ValueError(f"{key} {value} ({cap.flag}) is over {cap.most}, the most a run takes: set it to at most "
                             f"{cap.most} ({cap.usual})")
    seq_len, micro_batch = values.get("seq_len"), values.get("micro_batch")
    if isinstance(seq_len, int) and isinstance(micro_batch, int) and seq_len * micro_batch > MAX_MICRO_TOKENS:
        raise ValueError(f"seq_len {seq_len} x micro_batch {micro_batch} = {seq_len * micro_batch} tokens in one forward "
                         f"pass, over {MAX_MICRO_TOKENS}: lower --seq-len or --micro-batch (and raise --grad-accum for "
                         f"the same batch)")
