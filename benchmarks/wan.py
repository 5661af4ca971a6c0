"""Slow links: synchronous DDP, Yeto (and torchft DiLoCo) over the same tbf-shaped star, in one run.

Two learners, each in its own network namespace joined to the hub (root namespace: nats-server, the
services, torchft's lighthouse) by a veth pair shaped with tbf to --rate on both ends (see lib_wan_net).
Same tiny Llama, same order-1 Markov chat data, same recipe, equal tokens (2 x --steps x 4 x 128).
Per arm: wall time from process start to the target held-out loss (DDP's held-out loss at --target-frac
of its steps), final held-out loss, bytes on the learner links; fault run: learner 1 is SIGKILLed at
--kill-frac of the steps and learner 0's longest step interval afterwards is compared to its median before.
Needs root (namespaces). Last line: yeto_time_to_target_over_ddp=<value>.

    .venv/bin/python benchmarks/wan.py [--steps 240] [--rate 20mbit] [--latency-ms 0] [--seed 0] [--torchft] [--dry-run]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def plan(args) -> list[str]:
    link = (f"TUN pairs to the hub, rate {args.rate} and {args.latency_ms:g} ms one-way delay each direction (lib_wan_tun)"
            if args.latency_ms > 0 else f"veth pairs to the hub, tbf rate {args.rate} both ends")
    return [f"link: {args.learners} learner namespaces, {link}",
            f"task: tiny Llama (4x64, seed {args.seed}) on Markov chat, "
            f"{args.steps} steps x micro-batch 4 x seq 128 per learner, lr 3e-3",
            "arms: ddp (gloo all-reduce every step), "
            f"yeto (default recipe{' ' + ' '.join(args.yeto_flags) if args.yeto_flags else ''})"
            + (", torchft DiLoCo" if args.torchft else ""),
            f"target: DDP held-out loss at step {int(args.target_frac * args.steps)}; eval every {args.eval_every} steps",
            f"fault: SIGKILL learner 1 at step {int(args.kill_frac * args.steps)} of learner 0 (yeto run 2)"]


def run_fault(hub, launch, work, args) -> tuple[list, float]:
    from lib_wan_arms import start_yeto
    procs = start_yeto(hub, launch, work, eval_every=args.eval_every)
    kill_step, deadline = int(args.kill_frac * args.steps), time.monotonic() + args.timeout_s
    while not any(d["step"] >= kill_step for _, d in procs[0].steps()):
        if time.monotonic() > deadline or procs[0].proc.poll() is not None:
            raise RuntimeError(f"learner 0 never reached step {kill_step}; see {procs[0].log}")
        time.sleep(0.05)
    kill_at = time.monotonic() - procs[0].t0
    procs[1].kill()
    procs[0].wait(args.timeout_s)
    return procs, kill_at


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=240, help="inner steps per learner (DDP: steps per rank)")
    ap.add_argument("--learners", type=int, default=2)
    ap.add_argument("--rate", default="20mbit", help="tbf rate of every link, each direction")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="one-way delay of every link (user-space emulator on TUN devices; RTT between learners is 4x)")
    ap.add_argument("--seed", type=int, default=0, help="model initialisation and the recipe's seed (data order), every arm")
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--target-frac", type=float, default=0.6)
    ap.add_argument("--kill-frac", type=float, default=0.4)
    ap.add_argument("--torchft", action="store_true", help="add the torchft DiLoCo arm (needs torchft-nightly)")
    ap.add_argument("--ft-sync-every", type=int, default=24, help="torchft DiLoCo's H (whole model, fp32)")
    ap.add_argument("--yeto-flag", dest="yeto_flags", action="append", default=[],
                    help="extra `yeto launch` flag for the Yeto arm, e.g. --yeto-flag=--sync-every=24")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    for line in plan(args):
        print(line)
    if args.dry_run:
        print("dry_run=ok")
        return 0
    import lib_task
    from lib_wan_net import Wan, available, since
    why = available()
    if why:
        raise SystemExit(f"benchmarks/wan.py {why}")
    import lib_wan_report as report
    from lib_wan_arms import YetoHub, build_launch, eval_artifact, run_ddp, start_yeto
    from lib_wan_proc import wait_all
    work = Path(tempfile.mkdtemp(prefix="yeto-wan-"))
    model = lib_task.write_tiny_model(work / "model", seed=args.seed)
    data = lib_task.write_markov_chat(work / "chat.jsonl")
    wan, hub, results = Wan(args.learners, rate=args.rate, delay_ms=args.latency_ms), None, {}
    try:
        wan.up()
        _, clean = build_launch("wan-clean", model, data, steps=args.steps, learners=args.learners,
                                extra=[f"--seed={args.seed}", *args.yeto_flags])
        procs, nbytes = run_ddp(wan, clean.recipe["train"], work, eval_every=args.eval_every, timeout=args.timeout_s)
        results["ddp"] = report.arm(procs[:1], nbytes)
        print(f"ddp: {results['ddp']}", flush=True)
        hub = YetoHub(wan, work / "home")
        before, app = wan.bytes(), hub.app_bytes()
        procs = start_yeto(hub, clean, work, eval_every=args.eval_every)
        wait_all(procs, args.timeout_s)
        results["yeto"] = report.arm(procs, since(wan, before))
        results["yeto"]["nats_up_down"] = tuple(b - a for a, b in zip(app, hub.app_bytes()))   # without TCP/IP
        results["yeto"]["artifact"] = eval_artifact(clean.recipe["train"], hub.finalize(clean.run_id), work)
        print(f"yeto: {results['yeto']}", flush=True)
        _, faulty = build_launch("wan-kill", model, data, steps=args.steps, learners=args.learners,
                                extra=[f"--seed={args.seed}", *args.yeto_flags])
        procs, kill_at = run_fault(hub, faulty, work, args)
        results["yeto"]["stall"] = report.stall_of(procs[0], kill_at)
        print(f"yeto fault: {results['yeto']['stall']}", flush=True)
        if args.torchft:
            from lib_wan_torchft import run_torchft
            results["torchft"] = run_torchft(wan, clean.recipe["train"], work, args)
            print(f"torchft: {results['torchft']}", flush=True)
            results["torchft"]["stall"] = run_torchft(wan, clean.recipe["train"], work, args,
                                                      kill_step=int(args.kill_frac * args.steps))
            print(f"torchft fault: {results['torchft']['stall']}", flush=True)
    finally:
        if hub is not None:
            hub.close()
        wan.down()
    print(f"(logs and data: {work})")
    for line in report.table(results, args):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
