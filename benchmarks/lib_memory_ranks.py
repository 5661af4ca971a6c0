"""Peak RSS of one learner rank on the CPU for benchmarks/memory.py --ranks, beside the planner's per-GPU need.

A fresh process builds the learner (learners/torch/build.py: load, tuning, checkpointing as the recipe says) and
trains `steps` steps with no sync; its VmHWM is the rank's peak, loading included. The planner's memory model
(schemas/memory_model.py) is per GPU and bf16 (a frozen LoRA base of 2 bytes per parameter, a CUDA context),
while a CPU rank holds f32 weights and Python, torch and transformers: its need is printed beside the peak for the
terms it shares (state, activations), not as a prediction of it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LADDER = (("tiny", "lora", "none"), ("tiny", "full", "none"), ("tiny", "lora", "nf4"),
          ("smollm2-135m", "lora", "none"), ("smollm2-135m", "full", "none"))


def child(model: str, tuning: str, quantization: str, steps: int, seq_len: int) -> None:
    import torch

    from yeto.learners.torch.api import TrainRecipe, build, dist, resolve_accel, tiny, train, trainable_parameters

    torch.set_num_threads(2)
    recipe = TrainRecipe(model=model, tuning=tuning, base_quantization=quantization, max_steps=steps, seq_len=seq_len,
                         micro_batch=1, lr=1e-4, warmup_steps=1)
    accel = resolve_accel(recipe, local_rank=0, prefer="cpu")
    built = build(recipe, accel=accel, topology=dist.Topology())
    data = tiny.packed_batches(built.tokenizer, tiny.chat_rows(200), seq_len=seq_len, micro_batch=1)
    train(built.model, data, recipe, accel=accel)
    params = sum(p.numel() for p in built.model.parameters())
    print(json.dumps({"peak": peak_rss(), "params": params,
                      "trainable": sum(p.numel() for _, p in trainable_parameters(built.model)),
                      "vocab": built.model.config.vocab_size, "lora_r": recipe.lora_r}))


def peak_rss() -> int:
    """This process's peak resident set (VmHWM): unlike ru_maxrss, it starts over at exec, so the parent's size
    before the child exec'd is not counted."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def measure(model: str, tuning: str, quantization: str, *, steps: int, seq_len: int, tiny_dir: Path) -> dict:
    path = str(tiny_dir) if model == "tiny" else model
    out = subprocess.run([sys.executable, __file__, path, tuning, quantization, str(steps), str(seq_len)],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def planner_need_gb(result: dict, tuning: str, quantization: str, seq_len: int) -> tuple[float, float]:
    """(state, activations) in GB of the planner's per-GPU model for this rank's model and shape."""
    from yeto.services.planner.api import Workload, fits

    w = Workload(weights_gb=result["params"] * 2 / 1e9, tuning=tuning, base_quantization=quantization, seq_len=seq_len,
                 micro_batch=1, lora_r=result["lora_r"], vocab=result["vocab"], activation_checkpointing="on")
    _, need = fits(w, 1, 1e9)
    return need.state_gb, need.activations_gb


def report(steps: int = 8, seq_len: int = 256) -> None:
    """Each learner rank's peak RSS, beside the planner's per-GPU state and activations (no error is claimed)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-c", "from yeto.learners.torch.api import tiny; "
                        f"tiny.write_model_dir(__import__('pathlib').Path({tmp!r}) / 'tiny')"],
                       cwd=ROOT, check=True, capture_output=True)
        for model, tuning, quantization in LADDER:
            r = measure(model, tuning, quantization, steps=steps, seq_len=seq_len, tiny_dir=Path(tmp) / "tiny")
            if "error" in r:
                print(f"rank {model} {tuning} {quantization}: not measured ({r['error']})")
                continue
            state, acts = planner_need_gb(r, tuning, quantization, seq_len)
            print(f"rank {model} {tuning} base {quantization}: {r['params'] / 1e6:.1f}M parameters, "
                  f"{r['trainable'] / 1e6:.2f}M trained; peak RSS {r['peak'] / 2**20:.0f} MiB (CPU, f32); planner per GPU "
                  f"(bf16): state {state * 1e3:.0f} MB + activations {acts * 1e3:.0f} MB + 1.5 GB CUDA context")


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
