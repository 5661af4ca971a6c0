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
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from lib_wan_proc import Proc


def run_fault(hub, launch, work: Path, args, *, replace: bool = False) -> tuple[list[Proc], dict]:
    """Start the run, SIGKILL learner 1 at the kill step of learner 0, report its exit, wait for the survivor (and,
    with `replace`, for the replacement started at once). Returns the processes (the replacement last) and the
    kill's times: monotonic (`kill_at`, since the processes' t0) and wall."""
    from lib_wan_arms import start_learner, start_yeto
    procs = start_yeto(hub, launch, work, eval_every=args.eval_every)
    kill_step, deadline = int(args.kill_frac * args.steps), time.monotonic() + args.timeout_s
    while not any(d["step"] >= kill_step for _, d in procs[0].steps()):
        if time.monotonic() > deadline or procs[0].proc.poll() is not None:
            raise RuntimeError(f"learner 0 never reached step {kill_step}; see {procs[0].log}")
        time.sleep(0.05)      # polling the learner's own progress lines: the kill point, not a synchronization
    kill_wall, kill_at = time.time(), time.monotonic() - procs[0].t0
    procs[1].kill()           # returns once the process is reaped
    exited_wall = hub.exited(launch, {1: None})
    times = {"kill_at": kill_at, "kill_wall": kill_wall, "exited_wall": exited_wall}
    if replace:               # as the launcher does on an exit: generation 1 at the island's last reported step
        last = max((d["step"] for _, d in procs[1].steps()), default=0)
        times |= {"replaced_wall": hub.replaced(launch, 1, 1), "replaced_from_step": last}
        procs.append(start_learner(hub, launch, work, 1, eval_every=args.eval_every, t0=procs[0].t0, generation=1,
                                   start_step=last))
    for p in [procs[0], *procs[2:]]:
        if p.wait(args.timeout_s) != 0:
            raise RuntimeError(f"a learner failed after the kill; see {p.log}")
    hub.exited(launch, {i: 0 for i in range(len(hub.wan.links)) if i != 1})
    if replace:
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


def global_model(hub, run_id: str, procs: list[Proc], *, kill: dict | None = None) -> dict:
    """The tape's view of a finished, finalized run: goodput by tokens and by time, and after a kill, the global
    model's next version and the rounds merged without the island (chaos.after_kill)."""
    from chaos import after_kill, metrics
    env = tape_env(hub)
    wait_taped(env, run_id, "ArtifactWritten")
    ends = [None] * len(procs)
    if kill:                  # learner 1 was paid until its kill (a replacement, last, until it finished)
        ends[1] = kill["kill_at"]
    out = goodput_time(procs, metrics(env, run_id)["tokens_merged"], ends=ends)
    if kill:
        out["kill"] = after_kill(env, run_id, kill["kill_wall"], 1)
        out["kill"]["launcher_exited_after_kill_s"] = kill["exited_wall"] - kill["kill_wall"]
    return out
