"""The torchft DiLoCo arm of benchmarks/wan.py: its Rust lighthouse on the hub, one replica group per namespace.

Each replica group is one process (`python lib_wan_torchft.py worker ...`) running Yeto's model, data
shard, optimizer and loss (the same as the learner's loop) wrapped in torchft's DiLoCo (fp32 pseudo-
gradients all-reduced with gloo every --ft-sync-every steps, synchronous quorum, outer SGD lr 0.7
momentum 0.9 Nesterov). It prints the learner's JSON progress lines, so it is timed like the others.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def worker(argv: list[str]) -> None:
    import argparse
    import socket
    from datetime import timedelta

    # torchft advertises socket.gethostname() for its per-quorum store and checkpoint server; in a
    # namespace the machine's name does not resolve to this replica: pin it to the replica's address.
    host = argv[argv.index("--host") + 1]
    socket.gethostname = lambda: host

    import torch
    from torch.distributed import TCPStore
    from torchft import Manager, ProcessGroupGloo
    from torchft.local_sgd import DiLoCo

    from yeto.learners.torch.batches import heldout_batches, train_batches
    from yeto.learners.torch.evaluate import evaluate, loss_sum
    from yeto.learners.torch.model import load_model, load_tokenizer, resolve
    from yeto.learners.torch.optim import build_optimizer, lr_at, set_lr
    from yeto.learners.torch.recipe import TrainRecipe
    from yeto.learners.torch.tuning import apply_tuning, trainable_parameters
    ap = argparse.ArgumentParser()
    for flag in ("--recipe", "--host", "--lighthouse"):
        ap.add_argument(flag, required=True)
    for flag in ("--replica", "--replicas", "--sync-every", "--eval-every"):
        ap.add_argument(flag, type=int, required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    recipe = TrainRecipe.from_json(Path(a.recipe).read_text())
    tok = load_tokenizer(resolve(recipe.model))
    torch.manual_seed(recipe.seed)
    model = apply_tuning(load_model(resolve(recipe.model)), recipe)
    params = trainable_parameters(model)
    inner = build_optimizer(params, recipe)
    outer = torch.optim.SGD([p for _, p in params], lr=0.7, momentum=0.9, nesterov=True)
    store = TCPStore(a.host, 0, is_master=True, wait_for_workers=False)
    manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=30)), min_replica_size=1, use_async_quorum=False,
                      load_state_dict=lambda sd: model.load_state_dict(sd["model"]),
                      state_dict=lambda: {"model": model.state_dict()}, replica_id=f"ft{a.replica}",
                      store_addr=a.host, store_port=store.port, rank=0, world_size=1, lighthouse_addr=a.lighthouse,
                      hostname=a.host, timeout=timedelta(seconds=30), quorum_timeout=timedelta(seconds=30),
                      connect_timeout=timedelta(seconds=30))
    heldout = heldout_batches(recipe, tok)
    batches = train_batches(recipe, tok, shard=a.replica, num_shards=a.replicas)
    started, tokens = time.monotonic(), 0
    model.train()
    with DiLoCo(manager, [model], inner, outer, sync_every=a.sync_every, pin_memory=False):
        for step in range(recipe.max_steps):
            batch, t_step = next(batches), time.perf_counter()
            set_lr(inner, lr_at(step, recipe))
            total, n = loss_sum(model, batch)
            (total / max(1, int(n))).backward()
            torch.nn.utils.clip_grad_norm_([p for _, p in params], recipe.clip_norm)
            inner.step()            # DiLoCo's post-step hook syncs every sync_every steps
            inner.zero_grad(set_to_none=True)
            tokens += int(n)
            seconds = time.perf_counter() - t_step
            held = evaluate(model, heldout) if (step + 1) % a.eval_every == 0 else None
            model.train()
            print(json.dumps({"event": "step", "step": step + 1, "loss": float(total.detach()) / max(1, int(n)),
                              "tokens": int(n), "seconds": seconds,
                              "heldout": held}), flush=True)
    print(json.dumps({"event": "done", "steps": recipe.max_steps, "tokens": tokens, "heldout": evaluate(model, heldout),
                      "seconds": time.monotonic() - started}), flush=True)
    manager.shutdown()


def run_torchft(wan, recipe: dict, work: Path, args, *, kill_step: int | None = None) -> dict:
    """Lighthouse on the hub, one replica group per link; returns the arm's report dict. `kill_step`:
    SIGKILL replica 1 when replica 0 reaches that step, and report replica 0's stall instead."""
    import subprocess

    import lib_wan_report as report
    from lib_wan_net import since
    from lib_wan_proc import Proc, wait_all
    path = work / "torchft-recipe.json"
    path.write_text(json.dumps({k: v for k, v in recipe.items() if k != "sync"}))
    port = 29640
    lh = subprocess.Popen([str(Path(sys.executable).parent / "torchft_lighthouse"), "--bind", f"0.0.0.0:{port}",
                           "--min_replicas", "1", "--join_timeout_ms", "2000"],
                          stdout=open(work / "lighthouse.log", "w"), stderr=subprocess.STDOUT)
    try:
        before, t0 = wan.bytes(), time.monotonic()
        procs = [Proc([*link.prefix(), sys.executable, __file__, "worker", "--recipe", str(path), "--host", link.ns_ip,
                       "--lighthouse", f"http://{link.hub_ip}:{port}", "--replica", str(i), "--replicas",
                       str(len(wan.links)), "--sync-every", str(args.ft_sync_every), "--eval-every", str(args.eval_every)],
                      log=work / f"torchft-{i}{'-kill' if kill_step else ''}.log", env={"GLOO_SOCKET_IFNAME": link.ns_if}, t0=t0)
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
