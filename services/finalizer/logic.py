"""The finalizer's decisions (pure): budget and limit cutoff, the final-cut state machine, the run's end.

Every message id derives from (run, what), so the first decision wins and a repeated one publishes once.
Waits are bounded: the syncer's answer by `final_cut_timeout_s`, learner acknowledgements by
`final_ack_timeout_s` (a dead learner never blocks the cut).
"""
from __future__ import annotations

from datetime import datetime

from yeto.infra.runner.spec import Publish, Retry
from yeto.schemas.base import Message, derive_id
from yeto.schemas.commands import StopRun
from yeto.schemas.final import BuildArtifact, FinalCutRequested, MarkFinal, RunFailed, RunFinalized, RunStopped
from yeto.schemas.fleet import StopIsland, learner_name
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.run_view import RunView, spend_usd
from yeto.services.finalizer.budget import cut_reason
from yeto.services.finalizer.state import ENDED, FinalRun, State

SOURCE = "finalizer"


def setting(run: FinalRun, name: str) -> float:
    """One of the recipe's timeouts, its default where the recipe gives none."""
    return float(getattr(LaunchRecipe.upcast(run.view.recipe).timeouts, name))


def run_spend(run: FinalRun, now: datetime) -> float:
    """Islands plus head up to `now`: the shared fold's spend, the one `yeto status` and the SQL views show."""
    return spend_usd(run.view, now)


def _msg(cls, run: FinalRun, **fields) -> Publish:
    run_id = run.view.run_id
    return Publish(cls(id=derive_id(run_id, cls.__name__), run_id=run_id, source=SOURCE, **fields))


def stop_islands(run: FinalRun, reason: str) -> list[Publish]:
    """StopIsland for every island still up; the ids match the launcher's, so either may send them."""
    run_id = run.view.run_id
    return [Publish(StopIsland(id=derive_id(run_id, "StopIsland", isl.index, isl.generation), run_id=run_id, source=SOURCE,
                               island=isl.index, generation=isl.generation, spec=isl.spec, reason=reason,
                               price_per_hour=isl.price_per_hour))
            for isl in run.view.islands if isl.phase == "up"]


def run_summary(run: FinalRun) -> dict:
    """What the artifact's provenance records of the run: each island's hardware and generations, rounds, steps."""
    fleet = [{"island": isl.index, **{k: isl.spec.get(k) for k in ("cloud", "gpu", "count", "nodes", "region", "spot")},
              "generations": isl.generation + 1} for isl in run.view.islands]
    steps = {name: learner.step for name, learner in sorted(run.view.learners.items())}
    losses = {name: learner.loss for name, learner in sorted(run.view.learners.items()) if learner.loss is not None}
    held = {name: learner.eval_loss for name, learner in sorted(run.view.learners.items()) if learner.eval_loss is not None}
    return {"fleet": fleet, "rounds_merged": run.view.rounds_merged, "learner_steps": steps, "learner_losses": losses,
            "learner_eval_losses": held}


def unplaceable(view: RunView) -> set[int]:
    """Islands a cloud refused at their current generation that no offer can take the place of (the planner's
    ReplanFailed, no move since) and that never came up: they will not train, so a run whose other islands trained to
    --max-steps is cut without them instead of waiting for them for good (the planner would still move one whose
    offer came back within the refusal's cool-down, if the run lasted)."""
    islands = {isl.index: isl for isl in view.islands}
    return {r.island for r in view.refusals if r.unplaced and r.moved_to is None and r.island in islands
            and islands[r.island].generation == r.generation and islands[r.island].phase in ("requested", "replacing")}


def _training(run: FinalRun, now: datetime, period_s: float) -> list[Publish]:
    phases = [isl.phase for isl in run.view.islands]
    if phases and all(p == "dropped" for p in phases):
        return [_msg(RunFailed, run, reason=f"every island was dropped; see `yeto logs {run.view.run_id}`")]
    found = cut_reason(run.view, now=now, period_s=period_s)
    unplaced = unplaceable(run.view)
    if (found is None and "finished" in phases
            and all(isl.phase in ("finished", "dropped") or isl.index in unplaced for isl in run.view.islands)):
        found = ("max_steps", "every island trained to --max-steps" + (
            f" (never placed: island {', '.join(map(str, sorted(unplaced)))}, which no offer could take; "
            f"see `yeto status {run.view.run_id}`)" if unplaced else ""))
    return [_msg(FinalCutRequested, run, reason=found[0], detail=found[1])] if found else []


def reconcile(run: FinalRun, now: datetime, period_s: float) -> list[Publish]:
    if run.phase == "training":
        return _training(run, now, period_s)
    if run.phase == "cutting":
        waited = (now - run.cut_at).total_seconds()
        if waited > setting(run, "final_cut_timeout_s"):
            return [_msg(RunFailed, run, reason=f"the syncer did not finish the final cut within {waited:.0f}s; "
                                                f"see `yeto logs` of the stack (syncer)")]
        return []
    if run.phase == "done":
        if not run.final["versions"]:   # cut before any learner's values reached the syncer: no artifact can come
            return [_msg(RunFailed, run, reason=f"the run was cut ({run.cut_reason}) before any learner synced with "
                                                f"the syncer, so there is no model to write; raise the limit or see "
                                                f"`yeto logs {run.view.run_id}`")]
        return [_msg(MarkFinal, run, **run.final)]
    if run.phase == "marked":
        expected = run.expected_acks()
        waited = (now - run.marked_at).total_seconds()
        if expected <= run.acks or waited >= setting(run, "final_ack_timeout_s"):
            build = _msg(BuildArtifact, run, recipe=run.view.recipe, versions=run.final["versions"], acked=sorted(run.acks),
                         **run_summary(run))
            return [build, *stop_islands(run, "final cut done")]
        return []
    if run.phase == "written":
        expected = {learner_name(i) for i in range(len(run.view.fleet))}
        return [_msg(RunFinalized, run, output=run.artifact["output"], manifest_sha256=run.artifact["manifest_sha256"],
                     reason=run.cut_reason or "user", spend_usd=round(run_spend(run, now), 6), acked=sorted(run.acks),
                     missing_acks=sorted(expected - run.acks))]
    return []


def on_stop(run: FinalRun | None, cmd: StopRun) -> list[Publish]:
    if run is None:   # its RunLaunched is not folded yet (or the run does not exist): ask again later
        raise Retry(f"run {cmd.run_id} is not known (yet)", delay_s=2.0)
    if run.phase in ENDED:
        return []
    if cmd.now:
        return [Publish(cmd.caused(RunStopped, reason=f"{cmd.reason}: yeto down --now", source=SOURCE)),
                *stop_islands(run, "yeto down --now")]
    if run.phase == "training":
        return [_msg(FinalCutRequested, run, reason="user", detail="yeto down")]
    return []


def make_decide(period_s: float):
    """decide(state, msg, now) with the accounting period (the service's tick) bound in."""
    def decide(state: State, msg: Message | None, now: datetime) -> list:
        if isinstance(msg, StopRun):
            return on_stop(state.get(msg.run_id), msg)
        if msg is not None and msg.kind == "command":
            return [msg]   # MarkFinal / BuildArtifact: performed by effects
        runs = list(state.values()) if msg is None else [state[msg.run_id]] if msg.run_id in state else []
        return [p for run in runs if run.phase not in ENDED for p in reconcile(run, now, period_s)]
    return decide
