"""Start-up: from `yeto launch` to every island's first optimizer step, stage by stage, on a fresh local stack.

Each rep starts `yeto launch --gpu local:1xcpu,...` (tiny model, --max-steps 4) under a fresh YETO_HOME, so the
launch starts the stack too, and reads the stage boundaries from real signals:
  cli         t0 (this script starts `yeto launch`) -> its `launched` line (LaunchRun published), less the stack's
              own seconds: parse, config, checks, the bus publish
  stack       the seconds the CLI's `started the local stack ... in X s` line reports: nats-server up, streams
              made, services spawned
  services    `launched` line -> RunLaunched on the tape: the launcher came up and handled LaunchRun
  spawn       RunLaunched -> the island's IslandUp (its processes started)
  import      the learner's `start` line `import_s`: its process start to the shell's entry (every import)
  build       `build_s` on the `start` line: device policy, tokenizer, model
  connect     `connect_s` on the `done` line: the sync hook (bus connect, layout declared)
  data        `data_s` on the `done` line: training batches and held-out set made, the first batch drawn
  first_step  the rest, to the island's first LearnerProgress on the tape: the initial keyframe's join, one step
    join      of first_step: `join_s` on the `done` line (initial pushes sent, version 0 adopted or fetched)
    step1     of first_step: the first `step` line's `seconds` less `first_batch_s` (counted in data): forward,
              backward, optimizer step, the step boundary
With --fresh-numba-cache each rep runs with NUMBA_CACHE_DIR an empty folder of its own (removed after): numba
compiles every kernel it runs, as on a fresh install or update, whatever the arm's tree has cached beside its source.
With --stack-first each rep starts the stack first (`yeto stack up`), waits until it is idle (the launcher's
pre-imported learner, learners/torch/zygote.py, has logged `ready` in <home>/logs/learner-zygote.log; an arm without
one: the stack up), then launches: a launch on a running stack, as every launch after a user's first. The stack
stage is then ~0 and the CLI's line says so.
The table shows, per stage, the median over reps of the island that reached its first step last (the critical one);
total = launch to the last island's first step. The learner's lines are read with YETO_LOG_FORMAT=json.

    .venv/bin/python benchmarks/startup.py [--reps 3] [--islands 2] [--stack-first] [--fresh-numba-cache]
                                           [--json PATH] [--dry-run]
    scripts/frozen.sh a85fb58 /tmp/fz-startup-base true
    .venv/bin/python benchmarks/startup.py --baseline-tree /tmp/fz-startup-base --reps 5 --json PATH
    .venv/bin/python benchmarks/startup.py --arm before=/tmp/fz-before --arm after=/tmp/fz-after --reps 5

An --arm is a frozen copy made by `scripts/frozen.sh <commit> <dir> true`; --baseline-tree DIR is `--arm base=DIR`
with this tree as the second arm (`here`). The arms alternate rep by rep (machine load hits them alike); with two or
more, the table has a column of per-stage ratios (median of the last arm over median of the first) and the last line
is `startup_<last>_over_<first>=<ratio of median totals>`. With one arm the last line is `startup_s=<median total>`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

YETO = str(Path(sys.executable).parent / "yeto")      # the venv's CLI (a frozen arm's env picks its own `yeto.*`)
STAGES = ("cli", "stack", "services", "spawn", "import", "build", "connect", "data", "first_step")
PARTS = ("join", "step1")     # parts of first_step (arms before 2026-12-05 do not print join_s: n/a)


def sql(home: Path, query: str) -> list[list]:
    """The tape of the stack under `home`, asked in this process."""
    from yeto.cli.tape_query import tape_query
    return [list(r) for r in tape_query(argparse.Namespace(state_dir=str(home), nats_url=None), query)["rows"]]


def arm_env(base: dict, frozen: Path | None) -> dict:
    """scripts/frozen.sh's environment for a frozen copy (its `yeto.*` first, in the CLI and every child)."""
    if frozen is None:
        return base
    return {**base, "YETO_LINKS": str(frozen / "build/links"),
            "PYTHONPATH": str(frozen / "build/site") + (f":{base['PYTHONPATH']}" if base.get("PYTHONPATH") else "")}


def launch(env: dict, cwd: Path, args, model: Path, data: Path, run: str) -> tuple[float, dict[str, float]]:
    """Start `yeto launch`; return t0 and the wall times its lines arrived, plus the stack seconds it reports."""
    argv = [YETO, "launch", "--gpu", ",".join(["local:1xcpu"] * args.islands), "--model", str(model), "--data",
            str(data), "--tuning", "full", "--max-steps", "4", "--seq-len", "128", "--micro-batch", "4",
            "--sync-every", "2", "--run-id", run]
    t0 = time.time()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[str, float] = {"stack_s": 0.0}     # no line: the stack was running
    for line in proc.stdout:
        if line.startswith("started the local stack"):
            seen["stack_s"] = float(line.split(" in ")[1].split(" s ")[0]) if " in " in line else float("nan")
        elif line.startswith("launched "):
            seen["launched"] = time.time()
    if proc.wait(timeout=120) != 0 or "launched" not in seen:
        raise RuntimeError(f"yeto launch failed: {proc.stderr.read()[-2000:]}")
    return t0, seen


def learner_lines(home: Path, run: str, island: int) -> dict[str, dict]:
    """The island's JSON `start`, first `step` and `done` lines from its log (the local launcher's file of its stdout)."""
    found = {}
    log = home / "runs" / run / "logs" / f"island-{island}.log"
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            found.setdefault(obj.get("event"), obj)     # the first `step` line
    return found


def stack_first(env: dict, tree: Path, home: Path, timeout_s: float) -> None:
    """`yeto stack up`, then, where the arm's tree has a pre-imported learner, wait for it to log `ready`."""
    subprocess.run([YETO, "stack", "up"], env=env, cwd=tree, capture_output=True, timeout=120, check=True)
    if not (tree / "learners/torch/zygote.py").exists():
        return
    log, deadline = home / "logs" / "learner-zygote.log", time.monotonic() + timeout_s
    while not (log.exists() and "ready:" in log.read_text(errors="replace")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{log}: the launcher's pre-imported learner did not log `ready` within {timeout_s} s")
        time.sleep(0.5)


def wait_done(home: Path, run: str, islands: int, timeout_s: float) -> list[dict[str, dict]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = [learner_lines(home, run, i) for i in range(islands)]
        if all("done" in x for x in lines):
            return lines
        time.sleep(0.5)
    raise RuntimeError(f"run {run}: not every island printed `done` within {timeout_s} s (see {home}/runs/{run}/logs)")


def tape_times(home: Path, run: str, islands: int) -> tuple[float, dict[int, float], dict[int, float]]:
    """RunLaunched, each island's IslandUp and first LearnerProgress (epoch seconds), waiting for the tape to hold them."""
    for _ in range(60):
        launched = sql(home, f"select min(epoch(ts)) from events where run_id = '{run}' and type = 'RunLaunched'")[0][0]
        up = dict(sql(home, f"select cast(payload->>'island' as int), min(epoch(ts)) from events where run_id = '{run}'"
                            " and type = 'IslandUp' group by 1"))
        first = dict(sql(home, f"select cast(split_part(payload->>'learner', '-', 2) as int), min(epoch(ts)) from events "
                               f"where run_id = '{run}' and type = 'LearnerProgress' group by 1"))
        if launched and len(up) == islands and len(first) == islands:
            return launched, up, first
        time.sleep(0.5)
    raise RuntimeError(f"run {run}: the tape lacks RunLaunched, IslandUp or LearnerProgress for some island")


def stages(t0: float, seen: dict, launched: float, up: float, first: float, lines: dict[str, dict]) -> dict[str, float]:
    """One island's stages (see the module docstring); they add up to launch -> its first step."""
    start, done = lines["start"], lines["done"]
    out = {"cli": seen["launched"] - t0 - seen["stack_s"], "stack": seen["stack_s"],
           "services": launched - seen["launched"], "spawn": up - launched,
           "import": start.get("import_s"), "build": start.get("build_s"),
           "connect": done.get("connect_s"), "data": done.get("data_s")}
    known = sum(v for v in out.values() if v is not None)
    return {**out, "first_step": first - t0 - known, "total": first - t0,
            "join": done.get("join_s"), "step1": step1(lines)}


def step1(lines: dict[str, dict]) -> float | None:
    """The first step's own seconds: its `step` line's, less the first batch's wait (data_s counts it)."""
    seconds, first_batch = lines.get("step", {}).get("seconds"), lines["done"].get("first_batch_s")
    return None if seconds is None or first_batch is None else seconds - first_batch


def one_rep(arm: str, frozen: Path | None, args, work: Path, rep: int) -> dict:
    home, run = work / f"{arm}-{rep}", f"startup-{arm}-{rep}"
    env = arm_env({**os.environ, "YETO_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "YETO_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1"}, frozen)
    if args.fresh_numba_cache:      # a fresh install's empty kernel cache, for the CLI, every service and learner
        env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"numba-{arm}-{rep}-", dir=work)
    try:
        if args.stack_first:
            stack_first(env, frozen or Path.cwd(), home, args.timeout_s)
        t0, seen = launch(env, frozen or Path.cwd(), args, work / "model", work / "chat.jsonl", run)
        lines = wait_done(home, run, args.islands, args.timeout_s)
        launched, up, first = tape_times(home, run, args.islands)
    finally:
        subprocess.run([YETO, "stack", "down"], env=env, cwd=frozen or Path.cwd(), capture_output=True, timeout=120)
    per_island = [stages(t0, seen, launched, up[i], first[i], lines[i]) for i in range(args.islands)]
    critical = max(per_island, key=lambda s: s["total"])
    print(f"{arm} rep {rep}: " + " ".join(f"{k}={v:.2f}" for k, v in critical.items() if v is not None), flush=True)
    shutil.rmtree(home, ignore_errors=True)
    if args.fresh_numba_cache:
        shutil.rmtree(env["NUMBA_CACHE_DIR"], ignore_errors=True)
    return {"arm": arm, "rep": rep, "critical": critical, "islands": per_island}


def medians(results: list[dict], arms: list[str]) -> dict[str, dict[str, float | None]]:
    """Per arm, per stage: the median over reps of the critical island's seconds (None: the arm does not report it)."""
    out: dict[str, dict[str, float | None]] = {}
    for a in arms:
        vals = {st: [r["critical"].get(st) for r in results if r["arm"] == a and r["critical"].get(st) is not None]
                for st in (*STAGES, *PARTS, "total")}
        out[a] = {st: statistics.median(v) if v else None for st, v in vals.items()}
    return out


def ratios(med: dict[str, dict[str, float | None]], arms: list[str]) -> dict[str, float | None]:
    """Per stage, the last arm's median over the first's (None where either is missing or the first is ~0)."""
    first, last = med[arms[0]], med[arms[-1]]
    return {st: last[st] / first[st] if first[st] is not None and last[st] is not None and first[st] > 1e-3 else None
            for st in first}


def table(med: dict[str, dict[str, float | None]], arms: list[str]) -> list[str]:
    two = len(arms) > 1
    head = [f"{a} median s" for a in arms] + ([f"{arms[-1]} / {arms[0]}"] if two else [])
    rows = [f"| stage | {' | '.join(head)} |", "|---|" + "---|" * len(head)]
    ratio = ratios(med, arms) if two else {}
    for stage in (*STAGES, *PARTS, "total"):
        cells = [f"{med[a][stage]:.2f}" if med[a][stage] is not None else "n/a" for a in arms]
        if two:
            cells.append(f"{ratio[stage]:.2f}" if ratio[stage] is not None else "n/a")
        rows.append(f"| {'first_step: ' + stage if stage in PARTS else stage} | {' | '.join(cells)} |")
    return rows


def tree_commit(tree: Path) -> str | None:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arm", action="append", default=[], metavar="NAME=DIR",
                    help="a frozen copy (scripts/frozen.sh) to measure; repeat to compare, alternating rep by rep")
    ap.add_argument("--baseline-tree", type=Path, metavar="DIR",
                    help="a frozen copy to measure first (arm `base`), this tree second (arm `here`), alternating")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--islands", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=240.0)
    ap.add_argument("--stack-first", action="store_true",
                    help="start the stack and let it settle before each launch (a launch on a running stack)")
    ap.add_argument("--fresh-numba-cache", action="store_true",
                    help="point NUMBA_CACHE_DIR at an empty folder each rep (a fresh install: every kernel compiles)")
    ap.add_argument("--json", type=Path, help="write every rep's stages here")
    ap.add_argument("--dry-run", action="store_true")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.baseline_tree and args.arm:
        parser().error("--baseline-tree is `--arm base=DIR` beside this tree: give one or the other")
    arms = dict(a.split("=", 1) for a in args.arm) if args.arm else {"here": ""}
    if args.baseline_tree:
        arms = {"base": str(args.baseline_tree), "here": ""}
    if any(not (Path(d) / "build/links").is_dir() for d in arms.values() if d):
        parser().error("an --arm DIR is a frozen copy: make it with `scripts/frozen.sh <commit> DIR true`")
    print(f"arms={list(arms)} reps={args.reps} islands={args.islands} stages={','.join(STAGES)}")
    if args.dry_run:
        print("dry_run=ok")
        return 0
    import lib_task
    work = Path(tempfile.mkdtemp(prefix="yeto-startup-"))
    lib_task.write_tiny_model(work / "model", seed=0)
    lib_task.write_markov_chat(work / "chat.jsonl")
    results = [one_rep(a, Path(d) if d else None, args, work, rep) for rep in range(args.reps) for a, d in arms.items()]
    names = list(arms)
    med = medians(results, names)
    if args.json:
        from lib_provenance import provenance
        trees = {a: {"dir": d or str(Path.cwd()), "commit": tree_commit(Path(d) if d else Path.cwd())}
                 for a, d in arms.items()}
        args.json.write_text(json.dumps({"argv": sys.argv[1:], "arms": trees, "medians": med,
                                         "ratios": ratios(med, names) if len(names) > 1 else None,
                                         "results": results, "provenance": provenance()}, indent=1))
    print("\n".join(table(med, names)))
    if len(names) > 1:
        print(f"startup_{names[-1]}_over_{names[0]}={med[names[-1]]['total'] / med[names[0]]['total']:.3f}")
    else:
        print(f"startup_s={med[names[0]]['total']:.2f}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
