"""Preemption: real local learners killed (SIGKILL) on a random schedule and replaced by the launcher.

Two runs on one local stack, side by side: fault-free, then the same recipe with `--kills` kills of a
random island at random times (`yeto chaos kill`). From the tape:
  goodput  = tokens merged / tokens computed, where tokens merged = Σ RoundMerged.tokens / fragments
             (each token is merged once per fragment) and tokens computed = Σ over (learner, generation)
             of its last LearnerProgress.tokens, plus for every killed generation an estimate of what it
             trained after its last report (progress is rate-limited): its last tokens/s times the seconds
             from that report to its IslandExited (which the launcher's watcher sees within ~1 s, so the
             estimate errs high, making goodput slightly pessimistic)
  rejoin_s = from a replacement's IslandReplaced to the first RoundMerged that lists its learner after it joined
  kill_to_next_global_s = from the kill (wall clock, same machine as the tape's) to the next RoundMerged without the
             killed island: the global model moving on without it (exited_to_next_global_s: from the launcher's
             IslandExited); rounds_merged_while_down = RoundMerged from the kill to the replacement's first merged
             contribution (or the run's end). A syncer that waited out a silence timeout merges none for a minute.
  goodput_time = useful island-seconds / paid island-seconds: paid = each island generation's metered life
             (the tape's island_uptime view), useful = the merged tokens' training seconds at the learners' own
             median tokens/s (start-up, evaluation, waits and lost work are paid, not useful)
  quality  = held-out masked CE of each run's artifact (the finalizer's export of the syncer's state)
Targets (issue 7): goodput >= 0.88, rejoin <= 30 s on CPU; (issue 14) next global <= 5 s after the island is
reported gone. Last line: goodput=<value>.

    .venv/bin/python benchmarks/chaos.py [--steps 400] [--kills 2] [--seed 0] [--islands 2] [--json PATH] [--dry-run]
    .venv/bin/python benchmarks/chaos.py --report DIR      # several seeds' --json: means with 95% t intervals
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lib_provenance import provenance

ROOT = Path(__file__).resolve().parents[1]
YETO = str(Path(sys.executable).parent / "yeto")      # the venv's CLI (also from a frozen copy)


def yeto(env, *argv, check=True) -> str:
    out = subprocess.run([YETO, *argv], env=env, capture_output=True, text=True, timeout=300)
    if check and out.returncode != 0:
        raise RuntimeError(f"yeto {' '.join(argv)} failed: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout


def sql(env, query: str) -> list[list]:
    """`yeto sql` of the stack under env's YETO_HOME, asked in this process (a CLI process per reading cost ~1 s)."""
    from yeto.cli.tape_query import tape_query
    return [list(row) for row in tape_query(argparse.Namespace(state_dir=env["YETO_HOME"], nats_url=None), query)["rows"]]


def finished(env, run: str) -> str | None:
    rows = sql(env, f"select type from events where run_id = '{run}' and type in "
                    "('RunFinalized','RunFailed','RunStopped') limit 1")
    return rows[0][0] if rows else None


def launch(env, args, model: Path, data: Path, run: str) -> None:
    yeto(env, "launch", "--gpu", ",".join(["local:1xcpu"] * args.islands), "--model", str(model), "--data", str(data),
         "--tuning", "full", "--lr", "3e-3", "--max-steps", str(args.steps), "--seq-len", "128",
         "--micro-batch", "4", "--sync-every", str(args.sync_every), "--seed", str(args.seed), "--run-id", run)


def metrics(env, run: str) -> dict:
    frags = sql(env, f"select count(distinct fragment) from rounds where run_id = '{run}'")[0][0] or 1
    merged = sql(env, f"select coalesce(sum(tokens), 0) from rounds where run_id = '{run}'")[0][0] / frags
    computed = sql(env, f"select coalesce(sum(t), 0) from (select max(tokens) t from learner_progress "
                        f"where run_id = '{run}' group by learner, generation)")[0][0]
    lost = sql(env, f"""select coalesce(sum(lp.rate * greatest(0, epoch(x.ts - lp.ts))), 0) from
        (select learner, generation, max(ts) ts, arg_max(tokens_per_s, ts) rate from learner_progress
         where run_id = '{run}' group by learner, generation) lp
        join (select 'island-' || (payload->>'island') learner, cast(payload->>'generation' as int) generation, min(ts) ts
              from events where run_id = '{run}' and type = 'IslandExited' and payload->>'exit_code' is null group by 1, 2) x
        on lp.learner = x.learner and lp.generation = x.generation""")[0][0]
    # A round listing the learner counts once its new generation joined (the dead one's last push may merge later).
    rejoin = sql(env, f"""select r.learner, r.generation, epoch(min(m.ts) - r.ts) from
        (select ts, 'island-' || (payload->>'island') learner, cast(payload->>'generation' as int) generation
         from events where run_id = '{run}' and type = 'IslandReplaced') r
        left join (select payload->>'learner' learner, cast(payload->>'generation' as int) generation, min(ts) ts
                   from events where run_id = '{run}' and type = 'LearnerJoined' group by 1, 2) j
          on j.learner = r.learner and j.generation = r.generation
        left join rounds m on m.run_id = '{run}' and m.ts > j.ts and cast(m.responders as varchar) like '%"' || r.learner || '"%'
        group by r.learner, r.generation, r.ts order by r.ts""")
    computed_all = computed + lost
    # Goodput by time: paid = every island generation's metered life (the tape's island_uptime: up to its exit,
    # replacement or the run's end); useful = the training seconds of the merged tokens, at the learners' own
    # throughput (each generation's median tokens/s over its reports), so start-up, evaluation, waits for a
    # global and lost work are paid but not useful.
    paid = sql(env, f"select coalesce(sum(hours), 0) * 3600 from island_uptime where run_id = '{run}'")[0][0]
    trained_s = sql(env, f"select coalesce(sum(t / r), 0) from (select max(tokens) t, median(tokens_per_s) r "
                         f"from learner_progress where run_id = '{run}' and tokens_per_s > 0 group by learner, generation)")[0][0]
    useful = min(merged, computed) * trained_s / max(1, computed)
    return {"fragments": frags, "tokens_merged": merged, "tokens_computed": computed_all, "tokens_reported": computed,
            "tokens_lost_estimate": lost, "goodput": merged / max(1, computed_all), "rejoin_s": [row[2] for row in rejoin],
            "paid_island_s": paid, "useful_island_s": useful, "goodput_time": useful / paid if paid else 0.0}


def after_kill(env, run: str, at: float, island: int) -> dict:
    """The global model after one kill at wall time `at` (epoch seconds): see the module's docstring."""
    victim, where = f"island-{island}", f"run_id = '{run}' and epoch(ts) > {at}"
    without = f"cast(responders as varchar) not like '%\"island-{island}\"%'"
    exited = sql(env, f"select min(epoch(ts)) from events where {where} and type = 'IslandExited' "
                      f"and payload->>'island' = '{island}'")[0][0]
    merged = sql(env, f"select min(epoch(ts)) from rounds where {where} and {without}")[0][0]
    back = sql(env, f"""select min(epoch(r.ts)) from rounds r where r.run_id = '{run}' and not ({without}) and r.ts >
        (select min(ts) from events where {where} and type = 'LearnerJoined' and payload->>'learner' = '{victim}')""")[0][0]
    down = sql(env, f"select count(*) from rounds where {where} and epoch(ts) < {back or 1e18}")[0][0]
    return {"island": island, "kill_to_next_global_s": None if merged is None else merged - at,
            "exited_to_next_global_s": None if merged is None or exited is None else merged - exited,
            "rounds_merged_while_down": down, "down_until_rejoin_s": None if back is None else back - at}


def artifact_ce(env, run: str, data: Path) -> float:
    import torch

    from yeto.learners.torch.api import TrainRecipe, evaluate, heldout_batches, load_model, load_tokenizer, resolve
    path = Path(env["YETO_HOME"]) / "runs" / run / "artifact" / "artifact"     # the output folder's deployable files
    torch.set_num_threads(1)
    source = resolve(str(path))
    recipe = TrainRecipe(model=str(path), data=str(data), seq_len=128, micro_batch=4)
    return evaluate(load_model(source), heldout_batches(recipe, load_tokenizer(source)))


def run_one(env, args, model, data, run: str, kills: list[tuple[float, int]]) -> dict:
    launch(env, args, model, data, run)
    started, pending, outcome, killed, training = time.monotonic(), list(kills), None, [], None
    while outcome is None:
        if time.monotonic() - started > args.timeout_s:
            raise RuntimeError(f"run {run} did not finish within {args.timeout_s} s")
        if training is None and sql(env, f"select count(*) from rounds where run_id = '{run}' "
                                         f"and num_responders >= {args.islands}")[0][0]:
            training = time.monotonic()      # kills count from the first round every island is in: all train
        now = time.monotonic() - (training or math.inf)
        if pending and now >= pending[0][0]:
            at, island = pending.pop(0)
            killed.append((time.time(), island))
            print(f"{run}: t={now:.0f}s kill island {island}: "
                  f"{yeto(env, 'chaos', 'kill', run, str(island), check=False).strip()}", flush=True)
        time.sleep(2.0)        # polling the tape through the CLI, as an operator would: not a synchronization
        outcome = finished(env, run)
    out = {"outcome": outcome, "wall_s": time.monotonic() - started, **metrics(env, run),
           "kills": [after_kill(env, run, at, island) for at, island in killed]}
    out["heldout_ce"] = artifact_ce(env, run, data) if outcome == "RunFinalized" else float("nan")
    print(f"{run}: {json.dumps(out)}", flush=True)
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--islands", type=int, default=2)
    ap.add_argument("--steps", type=int, default=400, help="inner steps per learner")
    ap.add_argument("--sync-every", type=int, default=24)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--first-kill-s", type=float, default=40.0,
                    help="earliest kill, seconds after the first round every island is in (all of them train)")
    ap.add_argument("--gap-s", type=float, default=45.0, help="mean seconds between kills (exponential)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--json", type=Path, help="write the arguments and both runs' numbers here")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--report", type=Path, metavar="DIR", help="summarize the --json files in DIR over their seeds (no run)")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.report:
        for line in report(args.report):
            print(line)
        return 0
    rng = random.Random(args.seed)
    t, kills = args.first_kill_s, []
    for _ in range(args.kills):
        kills.append((round(t, 1), rng.randrange(args.islands)))
        t += rng.expovariate(1.0 / args.gap_s)
    print(f"islands={args.islands} steps={args.steps} H={args.sync_every} kills (s after all train, island)={kills}")
    if args.dry_run:
        print("dry_run=ok")
        return 0
    import lib_task
    home = Path(tempfile.mkdtemp(prefix="yeto-chaos-"))
    env = {**os.environ, "YETO_HOME": str(home / "home"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    model = lib_task.write_tiny_model(home / "model", seed=args.seed)
    data = lib_task.write_markov_chat(home / "chat.jsonl")
    try:
        clean = run_one(env, args, model, data, f"chaos-clean-{args.seed}", [])
        faulty = run_one(env, args, model, data, f"chaos-kill-{args.seed}", kills)
    finally:
        yeto(env, "stack", "down", check=False)
    rejoin = [s for s in faulty["rejoin_s"] if s is not None]
    print(f"fault-free: goodput={clean['goodput']:.3f} ce={clean['heldout_ce']:.4f} wall={clean['wall_s']:.0f}s")
    print(f"with kills: goodput={faulty['goodput']:.3f} ce={faulty['heldout_ce']:.4f} wall={faulty['wall_s']:.0f}s "
          f"rejoin_s={rejoin} (replacements never merged: {len(faulty['rejoin_s']) - len(rejoin)})")
    print(f"quality_delta_pct={100 * (faulty['heldout_ce'] - clean['heldout_ce']) / clean['heldout_ce']:+.2f} "
          f"max_rejoin_s={max(rejoin, default=float('nan')):.1f}")
    for k in faulty["kills"]:
        print(" ".join(f"{key}={_num(value)}" for key, value in k.items()))
    waits = [k["kill_to_next_global_s"] for k in faulty["kills"]]
    print(f"max_kill_to_next_global_s={_num(max(waits, key=lambda w: math.inf if w is None else w, default=None))} "
          f"min_rounds_merged_while_down={min((k['rounds_merged_while_down'] for k in faulty['kills']), default=0)}")
    print(f"goodput_time: fault-free {clean['goodput_time']:.3f} ({clean['useful_island_s']:.0f} useful of "
          f"{clean['paid_island_s']:.0f} paid island-seconds), with kills {faulty['goodput_time']:.3f} "
          f"({faulty['useful_island_s']:.0f} of {faulty['paid_island_s']:.0f})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"argv": sys.argv[1:] if argv is None else list(argv), "kills": kills,
                                         "clean": clean, "faulty": faulty,
                                         "provenance": provenance(None if argv is None else ["benchmarks/chaos.py", *argv])},
                                        indent=1) + "\n")
    print(f"goodput={faulty['goodput']:.3f}")
    return 0


def report(folder: Path) -> list[str]:
    """Per island count, over the seeds of the --json files in `folder`: mean [95% t interval] of the fault run's
    artifact against the same seed's fault-free one, goodput by tokens and by time of both runs, the next merged
    global after the kill and after IslandExited, rounds merged while the island was down and the replacement's
    rejoin; with how many seeds met issue 14's targets (artifact within 1%, next global <= 5 s after IslandExited)."""
    from lib_compare import fmt_ci
    per: dict[int, list[dict]] = {}
    for path in sorted(folder.glob("*.json")):
        run = json.loads(path.read_text())
        run["args"] = parser().parse_args(run["argv"])
        per.setdefault(run["args"].islands, []).append(run)
    if not per:
        return [f"no chaos.py --json file in {folder}"]
    lines = ["| islands | seeds | artifact vs fault-free % | within 1% | goodput by tokens (fault-free / kills) "
             "| goodput by time (fault-free / kills) | next global after the kill s | after IslandExited s | <= 5 s "
             "| rounds while down | rejoin s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for islands, runs in sorted(per.items()):
        clean, faulty = [r["clean"] for r in runs], [r["faulty"] for r in runs]
        delta = [100 * (f["heldout_ce"] - c["heldout_ce"]) / c["heldout_ce"] for c, f in zip(clean, faulty)]
        kills = [k for f in faulty for k in f["kills"]]
        after = [k["kill_to_next_global_s"] for k in kills if k["kill_to_next_global_s"] is not None]
        exited = [k["exited_to_next_global_s"] for k in kills if k["exited_to_next_global_s"] is not None]
        rejoin = [s for f in faulty for s in f["rejoin_s"] if s is not None]
        seeds = ",".join(str(r["args"].seed) for r in runs)
        lines.append(f"| {islands} | {seeds} | {fmt_ci(delta)} | {sum(d <= 1.0 for d in delta)}/{len(delta)} "
                     f"| {fmt_ci([c['goodput'] for c in clean], '.3f')} / {fmt_ci([f['goodput'] for f in faulty], '.3f')} "
                     f"| {fmt_ci([c['goodput_time'] for c in clean], '.3f')} / "
                     f"{fmt_ci([f['goodput_time'] for f in faulty], '.3f')} "
                     f"| {fmt_ci(after, '.2f')} (max {max(after, default=math.nan):.2f}) | {fmt_ci(exited, '.2f')} "
                     f"| {sum(e <= 5.0 for e in exited)}/{len(kills)} "
                     f"| {fmt_ci([float(k['rounds_merged_while_down']) for k in kills], '.1f')} | {fmt_ci(rejoin, '.1f')} |")
    return lines


def _num(value) -> str:
    return "none" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    sys.exit(main())
