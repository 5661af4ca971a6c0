"""Bytes on the wire per synced parameter, both directions, in steady state; q4 grid error and throughput.

Runs real DilocoSync learners against the real SyncerCore in one process (no NATS), counting every
payload byte plus its NATS header (the Yeto-Fragment JSON) per chunk. Up: a learner's pushes per pushed
value. Down: what a subscribed learner receives (deltas; keyframes are read only on (re)join) per value.
bf16 up and down would be 2 + 2 = 4 bytes per parameter.

    .venv/bin/python benchmarks/wire.py [--params 2000000] [--learners 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from yeto.learners.api import DilocoSync
from yeto.schemas import codecs
from yeto.schemas.fragments import split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.subjects import CHUNK_BYTES
from yeto.services.syncer.api import SyncerCore, perform


class Arrays(dict):
    def names(self):
        return sorted(self)

    def shape(self, n):
        return self[n].shape

    def dtype(self, n):
        return "float32"

    def read(self, n):
        return self[n]

    def write(self, n, v):
        self[n] = v


def wire(num_params: int, num_learners: int) -> tuple[float, float]:
    cfg = SyncConfig(num_fragments=8, inner_steps=8)
    rng = np.random.default_rng(0)
    per_layer = num_params // 16
    init = {f"model.layers.{i}.w": rng.standard_normal(per_layer).astype(np.float32) * 0.02 for i in range(16)}
    core = SyncerCore(cfg, run_id="r-wire")
    learners = [DilocoSync(Arrays({k: v.copy() for k, v in init.items()}), cfg, run_id="r-wire", learner=f"l{m}")
                for m in range(num_learners)]
    counters = {"up": 0, "up_values": 0, "down": 0, "down_values": 0, "steady": False}

    class Learners:                                   # outputs.Sink: broadcasts reach every learner
        chunk_bytes = CHUNK_BYTES

        def chunk(self, h, chunk):
            for s in learners:
                s.offer(h, chunk)
            if counters["steady"] and h.kind == "delta":                  # one subscribed learner's view
                counters["down"] += len(chunk) + sum(len(k) + len(v) for k, v in h.to_nats().items())
                counters["down_values"] += h.numel if h.chunk == 0 else 0

        def event(self, event):
            pass

        def snapshot(self, snap):
            pass

        snapshot_later = snapshot

        def wake(self, at):                           # the loop ticks the core every step
            pass

    def deliver(outputs):
        perform(outputs, Learners())

    def send(push, now):
        for h, chunk in split_chunks(push.header, push.payload):
            if counters["steady"] and h.kind == "push":
                counters["up"] += len(chunk) + sum(len(k) + len(v) for k, v in h.to_nats().items())
                counters["up_values"] += h.numel if h.chunk == 0 else 0
            deliver(core.receive(h, chunk, now))

    for s in learners:
        for push in s.init_pushes():
            send(push, 0.0)
    for step in range(1, 8 * 6 + 1):
        counters["steady"] = step > 16                                              # skip the first two sweeps
        for s in learners:
            for value in s.arrays.values():
                value -= 1e-3 * rng.standard_normal(value.size).astype(np.float32)
            for push in s.after_step(step, 1000, step_time_s=0.01):
                send(push, step * 0.01)
        deliver(core.tick(step * 0.01))
    return counters["up"] / counters["up_values"], counters["down"] / counters["down_values"]


def grid_errors(x: np.ndarray) -> dict[str, float]:
    grids = {"uniform (chosen)": np.arange(8) / 7, "uniform midrise": (2 * np.arange(8) + 1) / 15,
             "power-of-two": np.r_[0, 2.0 ** -np.arange(6, -1, -1)]}
    blocks = x[: x.size // 256 * 256].reshape(-1, 256).astype(np.float64)
    scale = np.abs(blocks).max(1, keepdims=True)
    scale[scale == 0] = 1
    out = {}
    for name, grid in grids.items():
        idx = np.searchsorted((grid[1:] + grid[:-1]) / 2, np.abs(blocks) / scale)
        out[name] = float(np.mean((np.sign(blocks) * grid[idx] * scale - blocks) ** 2) / np.mean(blocks ** 2))
    return out


def adamw_delta() -> np.ndarray:
    """A real pseudo-gradient: 24 AdamW steps of a small MLP on a regression task."""
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    start = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    for _ in range(24):
        x = torch.randn(32, 64)
        loss = (model(x) - x.roll(1, dims=1)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return (torch.cat([p.detach().flatten() for p in model.parameters()]) - start).numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=2_000_000)
    ap.add_argument("--learners", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    samples = {"gaussian": rng.standard_normal(1 << 20), "student-t(3)": rng.standard_t(3, 1 << 20)}
    try:
        samples["AdamW delta, 24 steps"] = adamw_delta()
    except ImportError:
        print("torch not installed: the real-delta grid measurement is skipped")
    for name, x in samples.items():
        print(f"q4 grid relative MSE on {name}: " + ", ".join(f"{g} {e:.4f}" for g, e in grid_errors(x).items()))
    x = rng.standard_normal(1 << 24).astype(np.float32)
    start = time.perf_counter()
    payload = codecs.Q4.encode(x)
    encoded = time.perf_counter()
    codecs.Q4.decode(payload, x.size)
    decoded = time.perf_counter()
    print(f"q4 encode {x.nbytes / (encoded - start) / 1e9:.2f} GB/s of f32, "
          f"decode {x.nbytes / (decoded - encoded) / 1e9:.2f} GB/s of f32")
    up, down = wire(args.params, args.learners)
    print(f"steady state, {args.params} params, {args.learners} learners: up {up:.4f} B/param, down {down:.4f} B/param, "
          f"both {up + down:.4f} B/param (bf16 up and down: 4.0, f32: 8.0)")
    print(f"wire_bytes_per_param_per_direction={max(up, down):.4f}")


if __name__ == "__main__":
    main()
