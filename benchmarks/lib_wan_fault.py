"""The fault arms of benchmarks/wan.py, measured on the global model (the syncer's versions), not only the survivor.

yeto-fault: the same run as `yeto` with learner 1 SIGKILLed when learner 0 reaches --kill-frac of its steps.
The launcher is stopped in this benchmark (the learners live in namespaces), so the benchmark publishes the
IslandExited its process watcher would (exit_code None: killed), as soon as the killed process is reaped
(YetoHub.exited): the launcher's watcher polls, so a real launcher reports it up to its poll interval later. The survivor
trains to the end, the run is finalized and its artifact scored like the fault-free run's. From the tape,
with benchmarks/chaos.py's readings (`after_kill`, `metrics`: the same SQL, not a copy):
  kill_to_next_global_s    kill -> the next RoundMerged without the killed island
  exited_to_next_global_s  IslandExited -> that RoundMerged (issue 14's target: <= 5 s)
  rounds_merged_while_down RoundMerged from the kill to the island's return (or the run's end)
  goodput_tokens           tokens merged (the tape) / tokens trained (the learners' own step lines)
  goodput_time             useful island-seconds / paid island-seconds: paid = each learner process's life
                           (start to exit or kill); useful = the step-seconds that trained the merged tokens
                           (tokens merged x the learners' mean step-seconds per token), so start-up, evaluation,
                           waits and lost work all count as paid but not useful
yeto-replace: yeto-fault, and then what the launcher does when an island exits (services/launcher/logic.py): the
island is replaced at once by generation 1 (IslandReplaced published here), which resumes at the island's last
reported step from the current global model; the run ends when every learner has trained its steps, so the fault
costs only the work lost since the killed learner's last merged push and the replacement's start-up. Also:
  down_until_rejoin_s      kill -> the first RoundMerged with the replacement in it
yeto-freeze: a silent island. Learner 1 is SIGSTOPped at the kill step: its process and its TCP connection live on and
nothing from it arrives, as over a black-holed link; nobody reports it (the launcher is stopped here; a running one
preempts it after its silence bound, 60 s at least: services/launcher/liveness.py). The syncer stops counting it live
on its own silence bound (services/syncer/liveness.py); that decision is not an event of its own, so the tape shows it
as the first RoundMerged without the island (with two islands the quorum is both, so no round can merge without it
before).
kill_to_next_global_s is then freeze -> the next merged global, beside the syncer's `silence_bound_s`. When the
survivors have finished, the frozen process is SIGKILLed and its IslandExited published, so the final cut does not
wait on its acknowledgement (tests/e2e/test_e2e_liveness.py measures that wait); it is paid until then.
yeto-survivors: the survivors-only reference, the run the fault rows must beat (or match within their interval): the
same recipe and seed on the islands that survive a fault (--learners - 1, the lost island absent from the start). A
fault run trains more tokens than it (the lost island's until the fault), so a fault row worse than it means the
fault cost more than the island's whole contribution.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from lib_wan_proc import Proc


def run_fault(hub, launch, work: Path, args, *, mode: str = "kill") -> tuple[list[Proc], dict]:
    """Start the run; when learner 0 reaches the kill step, SIGKILL learner 1 and report its exit (`kill`), then, with
    `replace`, start its replacement at once; or SIGSTOP it and report nothing (`freeze`: a silent island). Wait for
    the survivor(s) (and the replacement). A frozen learner is SIGKILLed and its exit reported only then, so the final
    cut does not wait on its acknowledgement. Returns the processes (the replacement last) and the fault's times:
    monotonic (`kill_at`, since the processes' t0) and wall (`kill_wall`: the kill or the freeze)."""
    from lib_wan_arms import start_learner, start_yeto
    procs = start_yeto(hub, launch, work, eval_every=args.eval_every)
    kill_step, deadline = int(args.kill_frac * args.steps), time.monotonic() + args.timeout_s
    while not any(d["step"] >= kill_step for _, d in procs[0].steps()):
        if time.monotonic() > deadline or procs[0].proc.poll() is not None:
            raise RuntimeError(f"learner 0 never reached step {kill_step}; see {procs[0].log}")
        time.sleep(0.05)      # polling the learner's own progress lines: the kill point, not a synchronization
    kill_wall, kill_at = time.time(), time.monotonic() - procs[0].t0
    times = {"kill_at": kill_at, "kill_wall": kill_wall, "mode": mode}
    if mode == "freeze":
        procs[1].proc.send_signal(signal.SIGSTOP)     # alive, connected, silent: nobody reports it
    else:
        procs[1].kill()           # returns once the process is reaped
        times["exited_wall"] = hub.exited(launch, {1: None})
    if mode == "replace":     # as the launcher does on an exit: generation 1 at the island's last reported step
        last = max((d["step"] for _, d in procs[1].steps()), default=0)
        times |= {"replaced_wall": hub.replaced(launch, 1, 1), "replaced_from_step": last}
        procs.append(start_learner(hub, launch, work, 1, eval_every=args.eval_every, t0=procs[0].t0, generation=1,
                                   start_step=last))
    for p in [procs[0], *procs[2:]]:
        if p.wait(args.timeout_s) != 0:
            raise RuntimeError(f"a learner failed after the kill; see {p.log}")
    if mode == "freeze":      # paid until now: a frozen machine runs (and costs) until someone stops it
        times["end_at"] = time.monotonic() - procs[0].t0
        procs[1].kill()
        times["exited_wall"] = hub.exited(launch, {1: None})
    hub.exited(launch, {i: 0 for i in range(len(hub.wan.links)) if i != 1})
    if mode == "replace":
        hub.exited(launch, {1: 0}, {1: 1})
    return procs, times


def tape_env(hub) -> dict:
    return {**os.environ, "YETO_HOME": str(hub.home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def wait_taped(env: dict, run_id: str, event: str, timeout: float = 60.0) -> None:
    """Until the tape holds `event` of the run (it records the stream a little behind the bus)."""
    from chaos import sql
    deadline = time.monotonic() + timeout
    while not sql(env, f"select count(*) from events where run_id = '{run_id}' and type = '{event}'")[0][0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the tape has no {event} of {run_id} after {timeout:.0f}s")
        time.sleep(0.5)       # polling the tape, as chaos.py does: not a synchronization


def life_s(proc: Proc, end: float | None = None) -> float:
    """Seconds the process was paid for: from its start (t0) to its last line, or to `end` (a kill)."""
    return end if end is not None else max((t for t, _ in proc.lines), default=0.0)


def goodput_time(procs: list[Proc], tokens_merged: float, *, ends: list[float | None]) -> dict:
    """Useful island-seconds over paid island-seconds (see the module's docstring), beside goodput by tokens."""
    steps = [d for p in procs for _, d in p.steps()]
    trained = sum(d["tokens"] for d in steps)
    step_s = sum(d["seconds"] for d in steps)
    paid = sum(life_s(p, end) for p, end in zip(procs, ends, strict=True))
    useful = min(tokens_merged, trained) * step_s / max(1, trained)
    return {"tokens_trained": trained, "tokens_merged": tokens_merged, "goodput_tokens": tokens_merged / max(1, trained),
            "step_s": step_s, "paid_island_s": paid, "useful_island_s": useful, "goodput_time": useful / paid if paid else 0.0}


def global_model(hub, run_id: str, procs: list[Proc], *, kill: dict | None = None, sync: dict | None = None) -> dict:
    """The tape's view of a finished, finalized run: goodput by tokens and by time, and after a kill or a freeze, the
    global model's next version and the rounds merged without the island (chaos.after_kill; a freeze: `after_freeze`,
    with the run's `sync` recipe)."""
    from chaos import after_kill, metrics
    env = tape_env(hub)
    wait_taped(env, run_id, "ArtifactWritten")
    ends = [None] * len(procs)
    if kill:                  # learner 1 was paid until its kill (a frozen one until it was killed at the end)
        ends[1] = kill.get("end_at", kill["kill_at"])
    out = goodput_time(procs, metrics(env, run_id)["tokens_merged"], ends=ends)
    try:                      # readings beside the result: a query that fails costs the run nothing else
        out["rounds"] = round_stats(env, run_id)
    except Exception as e:  # noqa: BLE001 - any failure of this reading is recorded, never the run's
        out["rounds"] = {"error": str(e)[-500:]}
    if kill:
        out["kill"] = after_kill(env, run_id, kill["kill_wall"], 1)
        if kill.get("mode") == "freeze":
            out["kill"] |= after_freeze(procs[1], sync or {})
        else:
            out["kill"]["launcher_exited_after_kill_s"] = kill["exited_wall"] - kill["kill_wall"]
    return out


def round_stats(env: dict, run_id: str) -> dict:
    """What the syncer's rounds were (its RoundMerged events): how many, how stale the pushes they merged (current
    version - base version, per push), the grace window granted and the time to quorum, the momentum restarts."""
    from chaos import sql
    stale = "cast(payload->'staleness' as int[])"
    row = sql(env, f"""select count(*), avg(list_avg({stale})), max(list_max({stale})),
        avg(case when list_max({stale}) > 0 then 1.0 else 0.0 end), avg(len({stale})),
        avg(cast(payload->>'grace_ms' as double)), max(cast(payload->>'grace_ms' as double)),
        avg(cast(payload->>'quorum_ms' as double)),
        count(*) filter (where payload->>'momentum_restarted' = 'true'),
        avg(try_cast(payload->>'momentum_cos' as double))
        from events where run_id = '{run_id}' and type = 'RoundMerged'""")[0]
    names = ("merged", "staleness_mean", "staleness_max", "stale_round_share", "pushes_per_round", "grace_ms_mean",
             "grace_ms_max", "quorum_ms_mean", "momentum_restarts", "momentum_cos_mean")
    # the time from a round's first push to its last, round by round (fragment, global version, ms): a fragment's first
    # rounds carry the learners' start-up gap, the later ones how far apart their push schedules run
    per_round = sql(env, f"""select cast(payload->>'fragment' as int), cast(payload->>'global_version' as int),
        cast(payload->>'quorum_ms' as double) from events where run_id = '{run_id}' and type = 'RoundMerged'
        order by 2, 1""")
    steady = sorted(ms for _, v, ms in per_round if v >= 3)
    return dict(zip(names, row)) | {
        "quorum_ms_rounds": [[f, v, round(ms, 1)] for f, v, ms in per_round],
        "quorum_ms_steady_median": steady[len(steady) // 2] if steady else None}


def after_freeze(frozen: Proc, sync: dict) -> dict:
    """A freeze's own readings beside after_kill's: nothing reported the island before the run's end (the IslandExited
    on the tape is the benchmark's, after the survivors finished), so there is no time after IslandExited; the
    syncer's silence bound for the frozen learner (services/syncer/liveness.py: SILENT_GAPS push gaps at its step time,
    within [FLOOR_S, learner_timeout_s]; its own median step before the freeze, one syncer owning every fragment), the
    time the first round merged without it may take from its last push."""
    import statistics

    from yeto.schemas.recipe import SyncConfig
    from yeto.services.syncer.api import silence_s
    config = SyncConfig.from_dict(sync)
    seconds = [d["seconds"] for _, d in frozen.steps()[1:]] or [d["seconds"] for _, d in frozen.steps()]
    step_s = statistics.median(seconds) if seconds else float("nan")     # nan: frozen before its first step
    return {"fault": "freeze", "exited_to_next_global_s": None, "frozen_step_s": step_s,
            "silence_bound_s": silence_s(step_s, config, config.num_fragments)}
