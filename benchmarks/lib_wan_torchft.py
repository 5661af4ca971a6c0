"""The torchft DiLoCo arm of benchmarks/wan.py: its Rust lighthouse on the hub, one replica group per namespace.

Each replica group is one process (`python lib_wan_torchft.py worker ...`) running Yeto's model, data
shard, optimizer and loss (the same as the learner's loop) wrapped in torchft's DiLoCo (pseudo-gradients
all-reduced with gloo every --ft-sync-every steps, synchronous quorum, outer SGD lr 0.7 momentum 0.9
Nesterov). It prints the learner's JSON progress lines, so it is timed like the others. Two settings:
  torchft       torchft's defaults: the whole model one fragment, fragment_sync_delay 0, fragment_update_alpha 0,
                fp32 payloads;
  torchft-best  Streaming DiLoCo as its paper recommends: Yeto's own fragments (learners/layout.py, the same
                `--fragments`; the non-empty ones, as Yeto's learners push only those), fragment_sync_delay 1,
                fragment_update_alpha 0.5, bf16 payloads. torchft's own payload compression (`should_quantize`)
                needs Triton on a CUDA device (torchft/quantization.py; on the CPU manager.allreduce silently
                sends fp32), and DiLoCo has no dtype option (a pseudo-gradient has its parameter's dtype), so bf16
                is a thin shim here (`bf16_payloads`): cast to bf16, all-reduce (gloo supports it), cast back.
  torchft-q     torchft-best with torchft's own quantized payloads (`should_quantize`: fp8 values, Triton kernels)
                on CUDA: the replicas train on the GPU (both on one GPU when only one is there) and gloo carries the
                fp8 all-to-all and all-gather. Refused where torch sees no CUDA device (scripts/gpu_check.sh runs it).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def parse_worker(argv: list[str]):
    import argparse
    ap = argparse.ArgumentParser()
    for flag in ("--recipe", "--host", "--lighthouse"):
        ap.add_argument(flag, required=True)
    for flag in ("--replica", "--replicas", "--sync-every", "--eval-every"):
        ap.add_argument(flag, type=int, required=True)
    ap.add_argument("--fragments", type=int, default=1, help="Yeto's --fragments: 1 = the whole model one fragment")
    ap.add_argument("--sync-delay", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=0.0)
    ap.add_argument("--payload", choices=("fp32", "bf16", "fp8"), default="fp32",
                    help="fp8: torchft's own quantized all-reduce (should_quantize), CUDA only")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    return ap.parse_args(argv)


def needs_cuda(device: str, payload: str) -> str | None:
    """Why this replica cannot run here: torchft's quantized payloads and a CUDA replica need a CUDA device."""
    import torch
    if (device == "cuda" or payload == "fp8") and not torch.cuda.is_available():
        what = ("torchft's fp8 payloads (should_quantize: Triton kernels on CUDA tensors) need" if payload == "fp8"
                else "a CUDA replica needs")
        return (f"{what} a CUDA device, and torch {torch.__version__} sees none here: run it where one is "
                "(scripts/gpu_check.sh, step torchft_quantized)")
    return None


def make_manager(a, model):
    """torchft's Manager for replica `a.replica`: its own store, the lighthouse's quorum, Gloo between replicas."""
    from datetime import timedelta

    from torch.distributed import TCPStore
    from torchft import Manager, ProcessGroupGloo
    store = TCPStore(a.host, 0, is_master=True, wait_for_workers=False)
    manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=30)), min_replica_size=1, use_async_quorum=False,
                      load_state_dict=lambda sd: model.load_state_dict(sd["model"]),
                      state_dict=lambda: {"model": model.state_dict()}, replica_id=f"ft{a.replica}",
                      store_addr=a.host, store_port=store.port, rank=0, world_size=1, lighthouse_addr=a.lighthouse,
                      hostname=a.host, timeout=timedelta(seconds=30), quorum_timeout=timedelta(seconds=30),
                      connect_timeout=timedelta(seconds=30))
    if a.payload == "bf16":
        bf16_payloads(manager)
    return manager


def inner_steps(model, params, inner, batches, heldout, recipe, eval_every: int, accel=None) -> int:
    """The learners' inner loop (schedule, masked CE, clip), one JSON line per step; returns the tokens trained.
    `accel`: the device the model is on (learners/accel.py; None: the CPU)."""
    import torch

    from yeto.learners.torch.api import evaluate, loss_sum, lr_at, set_lr, to_device
    tokens = 0
    model.train()
    for step in range(recipe.max_steps):
        batch, t_step = next(batches), time.perf_counter()
        if accel is not None:
            batch = to_device(batch, accel.device)
        set_lr(inner, lr_at(step, recipe))
        total, n = loss_sum(model, batch)
        (total / max(1, int(n))).backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in params], recipe.clip_norm)
        inner.step()            # DiLoCo's post-step hook syncs every sync_every steps
        inner.zero_grad(set_to_none=True)
        tokens += int(n)
        seconds = time.perf_counter() - t_step
        held = evaluate(model, heldout, accel=accel) if (step + 1) % eval_every == 0 else None
        model.train()
        print(json.dumps({"event": "step", "step": step + 1, "loss": float(total.detach()) / max(1, int(n)),
                          "tokens": int(n), "seconds": seconds, "heldout": held}), flush=True)
    return tokens


def worker(argv: list[str]) -> None:
    import socket

    # torchft advertises socket.gethostname() for its per-quorum store and checkpoint server; in a
    # namespace the machine's name does not resolve to this replica: pin it to the replica's address.
    host = argv[argv.index("--host") + 1]
    socket.gethostname = lambda: host
    a = parse_worker(argv)
    why = needs_cuda(a.device, a.payload)
    if why:                 # before torchft is imported: on the CPU the refusal, not an import error, is the answer
        raise SystemExit(f"lib_wan_torchft.py worker: {why}")

    import torch
    from torchft.local_sgd import DiLoCo

    from yeto.learners.torch.api import (
        TrainRecipe,
        apply_tuning,
        build_optimizer,
        evaluate,
        heldout_batches,
        load_model,
        load_tokenizer,
        resolve,
        train_batches,
        trainable_parameters,
    )
    torch.set_num_threads(1)
    recipe = TrainRecipe.from_json(Path(a.recipe).read_text())
    tok = load_tokenizer(resolve(recipe.model))
    torch.manual_seed(recipe.seed)
    model = apply_tuning(load_model(resolve(recipe.model)), recipe)
    accel = None
    if a.device == "cuda":
        from yeto.learners.api import accel as accel_policy
        accel = accel_policy.detect(prefer="cuda")
        model = model.to(accel.device)
    params = trainable_parameters(model)
    inner = build_optimizer(params, recipe)
    fragments = fragment_modules(params, a.fragments) if a.fragments > 1 else [model]
    outer = [torch.optim.SGD(list(f.parameters()), lr=0.7, momentum=0.9, nesterov=True) for f in fragments]
    manager = make_manager(a, model)
    heldout = heldout_batches(recipe, tok)
    batches = train_batches(recipe, tok, shard=a.replica, num_shards=a.replicas)
    started = time.monotonic()
    quantize = {"should_quantize": True} if a.payload == "fp8" else {}       # torchft's own: fp8 over the wire
    with DiLoCo(manager, fragments, inner, outer, sync_every=a.sync_every, pin_memory=False,
                fragment_sync_delay=a.sync_delay, fragment_update_alpha=a.alpha, **quantize):
        tokens = inner_steps(model, params, inner, batches, heldout, recipe, a.eval_every, accel)
    print(json.dumps({"event": "done", "steps": recipe.max_steps, "tokens": tokens,
                      "heldout": evaluate(model, heldout, accel=accel),
                      "seconds": time.monotonic() - started}), flush=True)
    manager.shutdown()


def fragment_modules(params: list, num_fragments: int) -> list:
    """Yeto's layout of `params` ((name, tensor) pairs) over `num_fragments`, as torchft's model fragments: one
    module per non-empty fragment holding that fragment's parameters (shared, not copied)."""
    import torch

    from yeto.learners.api import TensorSpec, plan_layout
    by_name = dict(params)
    layout = plan_layout([TensorSpec(n, tuple(p.shape), str(p.dtype)) for n, p in params], num_fragments)
    out = []
    for f in layout.active:
        module = torch.nn.Module()
        for t in layout.fragments[f]:
            module.register_parameter(t.name.replace(".", "__"), by_name[t.name])
        out.append(module)
    return out


def bf16_payloads(manager) -> None:
    """Make `manager.allreduce` carry bf16: each fp32 tensor is cast down, all-reduced, and copied back into the
    caller's tensor when its work is waited on (DiLoCo waits on every work before it reads the result)."""
    import torch
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    class CastBack(dist._Work):
        def __init__(self, work, low, dst) -> None:
            super().__init__()
            self.work, self.low, self.dst = work, low, dst

        def wait(self, timeout=None) -> bool:
            self.work.wait()
            self.dst.copy_(self.low)
            return True

    full = manager.allreduce

    def allreduce(tensor, should_quantize: bool = False, reduce_op=ReduceOp.AVG):
        if tensor.dtype != torch.float32:
            return full(tensor, should_quantize, reduce_op)
        low = tensor.to(torch.bfloat16)
        return CastBack(full(low, False, reduce_op), low, tensor)
    manager.allreduce = allreduce


SETTINGS = {"torchft": {"fragments": 1, "sync_delay": 0, "alpha": 0.0, "payload": "fp32"},
            "torchft-best": {"fragments": 8, "sync_delay": 1, "alpha": 0.5, "payload": "bf16"},
            "torchft-q": {"fragments": 8, "sync_delay": 1, "alpha": 0.5, "payload": "fp8", "device": "cuda"}}
"""The torchft arms (see the module's docstring); the fragment count of the streaming ones is the Yeto recipe's."""


def run_torchft(wan, recipe: dict, work: Path, args, *, name: str = "torchft", kill_step: int | None = None) -> dict:
    """Lighthouse on the hub, one replica group per link, with the settings of arm `name`; returns the arm's
    report dict. `kill_step`: SIGKILL replica 1 when replica 0 reaches that step, and report replica 0's stall instead."""
    import subprocess

    import lib_wan_report as report
    from lib_wan_net import since
    from lib_wan_proc import Proc, wait_all
    path = work / "torchft-recipe.json"
    path.write_text(json.dumps({k: v for k, v in recipe.items() if k != "sync"}))
    yeto_fragments = int((recipe.get("sync") or {}).get("num_fragments") or 8)
    setting = {**SETTINGS[name], **({"fragments": yeto_fragments} if SETTINGS[name]["fragments"] > 1 else {})}
    settings = [x for k, v in setting.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    port = 29640 + args.net           # the lighthouse binds on the hub: two runs at once (different --net) never share it
    lh = subprocess.Popen([str(Path(sys.executable).parent / "torchft_lighthouse"), "--bind", f"0.0.0.0:{port}",
                           "--min_replicas", "1", "--join_timeout_ms", "2000"],
                          stdout=open(work / f"lighthouse-{name}.log", "w"), stderr=subprocess.STDOUT)
    try:
        before, t0 = wan.bytes(), time.monotonic()
        procs = [Proc([*link.prefix(), sys.executable, __file__, "worker", "--recipe", str(path), "--host", link.ns_ip,
                       "--lighthouse", f"http://{link.hub_ip}:{port}", "--replica", str(i), "--replicas",
                       str(len(wan.links)), "--sync-every", str(args.ft_sync_every), "--eval-every", str(args.eval_every),
                       *settings],
                      log=work / f"{name}-{i}{'-kill' if kill_step else ''}.log", env={"GLOO_SOCKET_IFNAME": link.ns_if}, t0=t0)
                 for i, link in enumerate(wan.links)]
        if kill_step is None:
            wait_all(procs, args.timeout_s)
            return report.arm(procs, since(wan, before))
        deadline = time.monotonic() + args.timeout_s
        while not any(d["step"] >= kill_step for _, d in procs[0].steps()):
            if time.monotonic() > deadline or procs[0].proc.poll() is not None:
                raise RuntimeError(f"torchft replica 0 never reached step {kill_step}; see {procs[0].log}")
            time.sleep(0.05)
        kill_at = time.monotonic() - t0
        procs[1].kill()
        procs[0].wait(args.timeout_s)
        return report.stall_of(procs[0], kill_at)
    finally:
        lh.kill()
        lh.wait()


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    worker(sys.argv[2:])
