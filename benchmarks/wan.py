"""Slow links: synchronous DDP, Yeto and torchft DiLoCo over the same tbf-shaped star, in one run.

Two learners, each in its own network namespace joined to the hub (root namespace: nats-server, the
services, torchft's lighthouse) by a veth pair shaped with tbf to --rate on both ends (see lib_wan_net).
Same tiny Llama, same order-1 Markov chat data, same recipe, equal tokens (2 x --steps x 4 x 128); the peak
inner lr is each arm's own with --lr (3e-3 for every arm by default), recorded in --json.
Arms (--arms; the torchft ones need torchft-nightly and --torchft or --arms). torchft-nightly declares
`torch>=2.7`, which would let pip replace the pinned CPU torch, so install it without its dependencies and
add the two it imports:  .venv/bin/pip install --no-deps torchft-nightly && .venv/bin/pip install
'opentelemetry-exporter-otlp-proto-http>=1.39.0' 'opentelemetry-sdk>=1.39.0'
  ddp            gloo all-reduce of the gradients every step (lib_wan_arms)
  yeto           the real stack, default recipe, finalized and its artifact scored
  yeto-a0        the same with --merge-alpha 0 (learners adopt the global model as is)
  yeto-sparse    yeto with claim 12's sparse recipe (SPARSE_FLAGS: topk4 pushes, topk8 broadcast deltas, error
                 feedback decay 0.8, outer lr 1, no outer momentum, merge alpha 0)
  yeto-ramp      yeto with the sync interval ramp (--ramp H0:R: --sync-every-start H0 --sync-ramp-steps R)
  yeto-fault     yeto with learner 1 SIGKILLed at --kill-frac of the steps, measured on the global model
                 (lib_wan_fault: next merged version after the kill, rounds merged without the island, the
                 finalized artifact against the fault-free one, goodput by tokens and by time) and on the survivor
  yeto-replace   yeto-fault, then the island replaced at once as the launcher does (generation 1 resumes at the
                 island's last reported step): the fault run's artifact against the fault-free one, as in production
  yeto-freeze    a silent island: learner 1 SIGSTOPped at --kill-frac, nobody reports it; the next merged global after
                 the freeze beside the syncer's silence bound (lib_wan_fault)
  yeto-survivors the survivors-only reference: yeto on --learners - 1 islands from the start (the lost island's
                 tokens never trained); every fault row's artifact is scored against it and against yeto's
  torchft        torchft DiLoCo, its defaults (one fragment, no delay, alpha 0, fp32)
  torchft-best   torchft Streaming DiLoCo: Yeto's fragments, fragment_sync_delay 1, alpha 0.5, bf16 payloads
  torchft-q      torchft-best with torchft's own fp8 payloads (should_quantize) on CUDA: refused without a CUDA
                 device (scripts/gpu_check.sh runs it where one is lent)
  torchft-fault  torchft (defaults) with replica 1 SIGKILLed: the survivor's stall
Per arm: wall time from process start to the target held-out loss (DDP's held-out loss at --target-frac of
its steps), final held-out loss, bytes on the learner links. --json writes every number. Needs root
(namespaces). Last line: yeto_time_to_target_over_ddp=<value>. `--report DIR` reads every run's --json in DIR
(several seeds) and prints each arm's means with 95% t intervals and the per-seed ratios against torchft-best,
then the fault arms' readings per island count (artifact against the same seed's fault-free one and its
survivors-only one, next global), then (runs at several --lr) each arm's final CE per inner lr and its best lr.

    .venv/bin/python benchmarks/wan.py [--steps 240] [--rate 20mbit] [--latency-ms 0] [--seed 0] [--torchft]
                                       [--arms ddp,yeto,...] [--lr 3e-3[,ARM=LR...]] [--net N] [--json PATH] [--dry-run]
                                       [--ddp-from JSON]   # a slow link: DDP's curve from a run of the same task
    .venv/bin/python benchmarks/wan.py --report benchmarks/results/wan/seeds
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path

YETO_ARMS = ("ddp", "yeto", "yeto-sparse", "yeto-a0", "yeto-ramp", "yeto-survivors", "yeto-fault", "yeto-replace", "yeto-freeze")
FAULT_ARMS = {"yeto-fault": "kill", "yeto-replace": "replace", "yeto-freeze": "freeze"}
TORCHFT_ARMS = ("torchft", "torchft-best", "torchft-q", "torchft-fault")
SPARSE_FLAGS = ["--codec-up=topk4", "--codec-down=topk8", "--feedback-decay=0.8", "--outer-lr=1.0",
                "--outer-momentum=0.0", "--merge-alpha=0.0"]
ARM_FLAGS = {"yeto": [], "yeto-sparse": SPARSE_FLAGS, "yeto-a0": ["--merge-alpha=0"], "yeto-ramp": [], "yeto-survivors": [],
             "yeto-fault": [], "yeto-replace": [], "yeto-freeze": []}
"""`yeto launch` flags of each Yeto arm, after --yeto-flag's (yeto-ramp: `arm_flags`, from --ramp)."""


def arm_flags(name: str, args) -> list[str]:
    if name != "yeto-ramp":
        return ARM_FLAGS[name]
    h0, ramp = args.ramp
    return [f"--sync-every-start={h0}", f"--sync-ramp-steps={ramp}"]


def ramp_arg(text: str) -> tuple[int, int]:
    """`6:120` -> (H0 6, ramp 120 steps)."""
    h0, sep, ramp = text.partition(":")
    if not (sep and h0.isdigit() and ramp.isdigit() and int(h0) >= 1 and int(ramp) >= 1):
        raise argparse.ArgumentTypeError(f"--ramp {text!r}: write H0:STEPS, e.g. 6:120 (both at least 1)")
    return int(h0), int(ramp)


def lr_arg(text: str) -> dict[str, float]:
    """`3e-3` (every arm) or `3e-3,yeto=6e-3,ddp=1e-2`: an arm named has its own inner lr, the others the bare one
    (3e-3 when none is bare); {"": default, arm: lr, ...}."""
    lrs: dict[str, float] = {"": 3e-3}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        arm, sep, value = part.rpartition("=")
        if sep and arm not in YETO_ARMS + TORCHFT_ARMS:
            raise argparse.ArgumentTypeError(f"--lr {text!r}: unknown arm {arm!r}; known: {', '.join(YETO_ARMS + TORCHFT_ARMS)}")
        try:
            lr = float(value)
        except ValueError:
            lr = float("nan")
        if not 0 < lr < 1:
            raise argparse.ArgumentTypeError(f"--lr {text!r}: {value!r} is not a learning rate in (0, 1)")
        lrs[arm] = lr
    return lrs


def sync_set_arg(text: str) -> tuple[str, float | str]:
    """`grace_max_s=5` -> ("grace_max_s", 5.0), `push_schedule=global` -> ("push_schedule", "global"): a numeric or
    string field of the sync recipe (schemas/recipe.py SyncConfig; SyncConfig checks a string's value)."""
    from dataclasses import fields

    from yeto.schemas.recipe import SyncConfig
    key, sep, value = text.partition("=")
    settable = {f.name: str(f.type) for f in fields(SyncConfig) if str(f.type) in ("int", "float", "str")}
    if not sep or key not in settable:
        raise argparse.ArgumentTypeError(f"--sync-set {text!r}: write FIELD=VALUE, FIELD one of {', '.join(settable)}")
    try:
        return key, {"int": int, "float": float, "str": str}[settable[key]](value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sync-set {text!r}: {value!r} is not a {settable[key]}") from None


def lr_of(name: str, args) -> float:
    """The inner lr of arm `name` (--lr): its own, else the bare one."""
    return args.lr.get(name, args.lr[""])


def arms_of(args) -> list[str]:
    if args.arms:
        arms = [a.strip() for a in args.arms.split(",") if a.strip()]
        unknown = [a for a in arms if a not in YETO_ARMS + TORCHFT_ARMS]
        if unknown:
            raise SystemExit(f"unknown arm(s) {unknown}; known: {', '.join(YETO_ARMS + TORCHFT_ARMS)}")
        if args.learners < 2 and any(a in FAULT_ARMS or a == "yeto-survivors" for a in arms):
            raise SystemExit(f"the fault arms and yeto-survivors lose island 1: they need --learners >= 2, not {args.learners}")
        return [a for a in YETO_ARMS + TORCHFT_ARMS if a in arms]
    return [*YETO_ARMS, *((a for a in TORCHFT_ARMS if a != "torchft-q") if args.torchft else ())]    # torchft-q: CUDA


def ddp_from(args, arms: list[str]) -> dict | None:
    """The ddp arm of --ddp-from's run, marked with where it came from; refused (SystemExit, saying what differs)
    unless that run trained the same task: seed, steps, learners, eval interval and ddp's inner lr."""
    if args.ddp_from is None:
        return None
    if "ddp" in arms:
        raise SystemExit("--ddp-from takes the ddp arm from another run: leave ddp out of --arms")
    try:
        earlier = json.loads(args.ddp_from.read_text())
        theirs = parser().parse_args(earlier["argv"])
        ddp = earlier["results"]["ddp"]
    except (OSError, ValueError, KeyError, SystemExit) as e:
        raise SystemExit(f"--ddp-from {args.ddp_from}: not a wan.py --json with a ddp arm ({e!r})") from None
    differ = [f"{k} {getattr(theirs, k)} there, {getattr(args, k)} here" for k in ("seed", "steps", "learners", "eval_every")
              if getattr(theirs, k) != getattr(args, k)]
    if lr_of("ddp", theirs) != lr_of("ddp", args):
        differ.append(f"ddp lr {lr_of('ddp', theirs):g} there, {lr_of('ddp', args):g} here")
    if differ:
        raise SystemExit(f"--ddp-from {args.ddp_from}: another task ({'; '.join(differ)}); use a run of this one")
    return {**ddp, "from": str(args.ddp_from), "rate": theirs.rate}


def plan(args) -> list[str]:
    link = (f"TUN pairs to the hub, rate {args.rate} and {args.latency_ms:g} ms one-way delay each direction (lib_wan_tun)"
            if args.latency_ms > 0 else f"veth pairs to the hub, tbf rate {args.rate} both ends")
    arms = arms_of(args)
    sets = (f"sync.{k}={v}" if isinstance(v, str) else f"sync.{k}={v:g}" for k, v in args.sync_set)
    extra = " ".join([*args.yeto_flags, *sets])
    what = {"ddp": "ddp (gloo all-reduce every step)",
            "yeto": f"yeto (default recipe{' ' + extra if extra else ''})",
            "yeto-sparse": f"yeto-sparse ({' '.join([*args.yeto_flags, *SPARSE_FLAGS])})",
            "yeto-a0": f"yeto-a0 ({' '.join([*args.yeto_flags, *ARM_FLAGS['yeto-a0']])})",
            "yeto-ramp": f"yeto-ramp ({' '.join([*args.yeto_flags, *arm_flags('yeto-ramp', args)])})",
            "yeto-fault": "yeto-fault (yeto, learner 1 killed)",
            "yeto-replace": "yeto-replace (yeto-fault, the island replaced at once as the launcher does)",
            "yeto-freeze": "yeto-freeze (yeto, learner 1 frozen: SIGSTOP)",
            "yeto-survivors": f"yeto-survivors (yeto on {args.learners - 1} island(s): the survivors-only reference)",
            "torchft": f"torchft (DiLoCo defaults: 1 fragment, H {args.ft_sync_every}, delay 0, alpha 0, fp32)",
            "torchft-best": f"torchft-best (Streaming DiLoCo: Yeto's fragments, H {args.ft_sync_every}, delay 1, "
                            "alpha 0.5, bf16)",
            "torchft-q": f"torchft-q (torchft-best's settings, H {args.ft_sync_every}, torchft's fp8 payloads on CUDA)",
            "torchft-fault": "torchft-fault (torchft, replica 1 killed)"}
    lines = [f"link: {args.learners} learner namespaces, {link}",
             f"task: tiny Llama (4x64, seed {args.seed}) on Markov chat, "
             f"{args.steps} steps x micro-batch 4 x seq 128 per learner, inner lr "
             + ", ".join(f"{a} {lr_of(a, args):g}" for a in arms),
             "arms: " + ", ".join(what[a] for a in arms),
             f"target: DDP held-out loss at step {int(args.target_frac * args.steps)}; eval every {args.eval_every} steps"
             + (f" (DDP's curve from {args.ddp_from})" if args.ddp_from else "")]
    faults = [a for a in arms if a.endswith("-fault") or a == "yeto-replace"]
    if "yeto-freeze" in arms:
        lines.append(f"freeze: SIGSTOP learner 1 at step {int(args.kill_frac * args.steps)} of learner 0 (yeto-freeze: "
                     "nobody reports it; next global version after the freeze beside the syncer's silence bound)")
    if faults:
        yeto_faults = [a for a in faults if a.startswith("yeto")]
        lines.append(f"fault: SIGKILL learner 1 at step {int(args.kill_frac * args.steps)} of learner 0"
                     + (f" ({', '.join(yeto_faults)}: IslandExited published once it is reaped; next global version, "
                        "rounds merged without it, artifact vs yeto's, goodput by tokens and by time"
                        + ("; yeto-replace: IslandReplaced and generation 1 from the island's last step at once"
                           if "yeto-replace" in faults else "") + ")" if yeto_faults else ""))
    return lines


def run_yeto_arm(name: str, hub, model: Path, data: Path, work: Path, args) -> dict:
    """One Yeto arm on the running hub: publish, train, finalize, score the artifact (and the fault's readings)."""
    import lib_wan_report as report
    from lib_wan_arms import build_launch, eval_artifact, start_yeto
    from lib_wan_fault import global_model, run_fault
    from lib_wan_net import since
    from lib_wan_proc import wait_all
    learners = args.learners - 1 if name == "yeto-survivors" else args.learners
    _, launch = build_launch(f"wan-{name}", model, data, steps=args.steps, learners=learners, lr=lr_of(name, args),
                             extra=[f"--seed={args.seed}", *args.yeto_flags, *arm_flags(name, args)],
                             sync_set=dict(args.sync_set))
    before, app = hub.wan.bytes(), hub.app_bytes()
    if name in FAULT_ARMS:
        procs, kill = run_fault(hub, launch, work, args, mode=FAULT_ARMS[name])
    else:
        procs, kill = start_yeto(hub, launch, work, eval_every=args.eval_every), None
        wait_all(procs, args.timeout_s)
        hub.exited(launch, {i: 0 for i in range(len(procs))})
    out = report.arm(procs if kill is None else procs[:1], since(hub.wan, before))
    out["nats_up_down"] = tuple(b - a for a, b in zip(app, hub.app_bytes()))   # without TCP/IP
    out["artifact"] = eval_artifact(launch.recipe["train"], hub.finalize(launch.run_id), work)
    out["global"] = global_model(hub, launch.run_id, procs, kill=kill, sync=launch.recipe["train"].get("sync"))
    if kill is not None:
        out["stall"] = report.stall_of(procs[0], kill["kill_at"])
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=240, help="inner steps per learner (DDP: steps per rank)")
    ap.add_argument("--learners", type=int, default=2)
    ap.add_argument("--rate", default="20mbit", help="tbf rate of every link, each direction")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="one-way delay of every link (user-space emulator on TUN devices; RTT between learners is 4x)")
    ap.add_argument("--seed", type=int, default=0, help="model initialisation and the recipe's seed (data order), every arm")
    ap.add_argument("--lr", type=lr_arg, default={"": 3e-3}, metavar="LR[,ARM=LR...]",
                    help="peak inner lr of every arm, and an arm's own, e.g. 3e-3,yeto=6e-3,ddp=1e-2 (default 3e-3)")
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--target-frac", type=float, default=0.6)
    ap.add_argument("--kill-frac", type=float, default=0.4)
    ap.add_argument("--arms", help=f"comma-separated, of {', '.join(YETO_ARMS + TORCHFT_ARMS)} "
                                   f"(default: {', '.join(YETO_ARMS)}, and the torchft ones but torchft-q with --torchft)")
    ap.add_argument("--torchft", action="store_true", help="add the torchft arms (needs torchft-nightly)")
    ap.add_argument("--ft-sync-every", type=int, default=24, help="torchft DiLoCo's H (every fragment's)")
    ap.add_argument("--yeto-flag", dest="yeto_flags", action="append", default=[],
                    help="extra `yeto launch` flag for every Yeto arm, e.g. --yeto-flag=--sync-every=24")
    ap.add_argument("--sync-set", type=sync_set_arg, action="append", default=[], metavar="FIELD=VALUE",
                    help="set a numeric or string field of every Yeto arm's sync recipe that `yeto launch` has no flag for, "
                         "e.g. --sync-set grace_max_s=5 --sync-set push_schedule=global (schemas/recipe.py SyncConfig)")
    ap.add_argument("--ramp", type=ramp_arg, default=(6, 120), metavar="H0:STEPS",
                    help="yeto-ramp's interval ramp: push every H0 steps at first, growing to H over STEPS (default 6:120)")
    ap.add_argument("--net", type=int, default=231, choices=range(1, 255), metavar="N",
                    help="learner i's link is 10.N.i.0/24 (default 231): two runs at once need different N")
    ap.add_argument("--ddp-from", type=Path, metavar="JSON",
                    help="the ddp arm's curve (the target) from an earlier run's --json of the same seed, steps, "
                         "learners and ddp lr, at any rate: DDP's losses do not depend on the link, its time does "
                         "(a slow link makes its all-reduce every step hours long); its time is not compared")
    ap.add_argument("--json", type=Path, help="write the arguments and every arm's numbers here")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--report", type=Path, metavar="DIR", help="summarize the --json files in DIR over their seeds (no run)")
    return ap


def torchft_missing(arms: list[str]) -> str | None:
    """Why the torchft arms cannot run here (checked before any arm starts, not after the Yeto ones)."""
    if not any(a.startswith("torchft") for a in arms):
        return None
    if "torchft-q" in arms:
        from lib_wan_torchft import needs_cuda
        why = needs_cuda("cuda", "fp8")
        if why:
            return f"cannot run the arm torchft-q: {why}"
    try:
        import torchft  # noqa: F401
    except ImportError as e:
        return (f"needs torchft for the arms {', '.join(a for a in arms if a.startswith('torchft'))} ({e}): install "
                f"it as this file's docstring says, or leave those arms out")
    return None


def report_only(folder: Path) -> int:
    """The tables of the JSON runs in `folder` (--report)."""
    import lib_wan_report as report
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    parsed = [(r, parser().parse_args(r["argv"])) for r in runs]
    tune = report.tune_table(parsed)
    for line in report.seeds_table(parsed) + [""] + report.faults_table(parsed) + ([""] + tune if tune else []):
        print(line)
    return 0


def run_arms(wan, arms: list[str], args, model: Path, data: Path, work: Path) -> dict:
    """Every arm in order (DDP, the Yeto arms on one stack, then torchft with the stack down); results by arm."""
    import lib_wan_report as report
    from lib_wan_arms import YetoHub, build_launch, run_ddp
    hub, results = None, {}
    try:
        _, clean = build_launch("wan-recipe", model, data, steps=args.steps, learners=args.learners, lr=lr_of("ddp", args),
                                extra=[f"--seed={args.seed}", *args.yeto_flags])
        recipe = clean.recipe["train"]              # every non-Yeto arm trains this recipe, at its own lr
        if "ddp" in arms:
            procs, nbytes = run_ddp(wan, recipe, work, eval_every=args.eval_every, timeout=args.timeout_s)
            results["ddp"] = report.arm(procs[:1], nbytes)
            print(f"ddp: {results['ddp']}", flush=True)
        for name in (a for a in arms if a.startswith("yeto")):
            hub = hub or YetoHub(wan, work / "home")
            results[name] = run_yeto_arm(name, hub, model, data, work, args)
            print(f"{name}: {results[name]}", flush=True)
        if hub is not None:
            hub.close()            # the stack takes no CPU from the torchft arms
            hub = None
        for name in (a for a in arms if a.startswith("torchft")):
            from lib_wan_torchft import run_torchft
            own = {**recipe, "lr": lr_of(name, args)}
            if name == "torchft-fault":
                results[name] = {"stall": run_torchft(wan, own, work, args, name="torchft",
                                                      kill_step=int(args.kill_frac * args.steps))}
            else:
                results[name] = run_torchft(wan, own, work, args, name=name)
            print(f"{name}: {results[name]}", flush=True)
    finally:
        if hub is not None:
            hub.close()
    return results


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.report:
        return report_only(args.report)
    arms = arms_of(args)
    ddp = ddp_from(args, arms)
    for line in plan(args):
        print(line)
    if args.dry_run:
        print("dry_run=ok")
        return 0
    import lib_task
    from lib_wan_net import Wan, available
    why = torchft_missing(arms) or available()
    if why:
        raise SystemExit(f"benchmarks/wan.py {why}")
    import lib_wan_report as report
    from lib_provenance import provenance
    from lib_wan_proc import kill_started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))     # stopped from outside: clean up in `finally`
    work = Path(tempfile.mkdtemp(prefix="yeto-wan-"))
    model = lib_task.write_tiny_model(work / "model", seed=args.seed)
    data = lib_task.write_markov_chat(work / "chat.jsonl")
    wan = Wan(args.learners, rate=args.rate, delay_ms=args.latency_ms, net=args.net)
    try:
        wan.up()
        results = ({"ddp": ddp} if ddp else {}) | run_arms(wan, arms, args, model, data, work)
    finally:
        kill_started()
        wan.down()
    print(f"(logs and data: {work})")
    lines = report.table(results, args)
    for line in lines:
        print(line)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"argv": sys.argv[1:] if argv is None else argv, "arms": arms,
                                         "lr": {a: lr_of(a, args) for a in arms},
                                         "results": results, "table": lines, "provenance": provenance()},
                                        indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
