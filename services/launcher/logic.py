"""The launcher's decisions (pure): launch a run's islands, replace a dead one, drop one that does not come back.

Level-triggered: `reconcile` looks at a run's whole state, so a decision lost to a crash is taken again;
every message id derives from (run, island, generation, what), so taking it twice publishes once.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from yeto.infra.runner.spec import Publish, Reject
from yeto.schemas.base import Event, Message, derive_id
from yeto.schemas.capacity import Capacity, over_capacity, oversubscribed
from yeto.schemas.commands import LaunchRun
from yeto.schemas.fleet import IslandDropped, IslandPreempted, IslandRequested, RunLaunched, StartIsland, StopIsland
from yeto.schemas.island_view import Island
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.offers import MoveIsland
from yeto.schemas.run_view import RunView
from yeto.services.launcher import external
from yeto.services.launcher.liveness import FLOOR_S, Bound, heartbeat_bound
from yeto.services.launcher.reach import unreachable
from yeto.services.launcher.state import State, backend_of, recorded_handle

Fit = Callable[[LaunchRun], "str | None"]     # why a LaunchRun's recipe cannot fit its islands, or None

SOURCE = "launcher"


@dataclass(frozen=True)
class Spawn:
    """Start the processes (or the managed job) of one island generation."""
    cmd: StartIsland


@dataclass(frozen=True)
class Kill:
    """Stop one island generation; `handle`: what its IslandUp/IslandReplaced recorded ("" if the state lacks it)."""
    cmd: StopIsland
    handle: str = ""


def setting(recipe: dict, name: str) -> float:
    """One of the recipe's timeouts (or max_crashes), its default where the recipe gives none."""
    return float(getattr(LaunchRecipe.upcast(recipe).timeouts, name))


def _island_fields(run_id: str, isl: Island, generation: int) -> dict:
    return dict(run_id=run_id, source=SOURCE, island=isl.index, generation=generation, spec=isl.spec,
                price_per_hour=isl.price_per_hour, backend=backend_of(isl.spec))


def start(run_id: str, recipe: dict, num_islands: int, isl: Island, generation: int) -> list[Publish]:
    """StartIsland first, then IslandRequested: a crash between the two leaves the island to be started again.
    A cloud island its learners could not reach the bus from ends at once, dropped with the reason (no retry)."""
    if why := unreachable(isl.spec, recipe):
        return [Publish(IslandDropped(id=derive_id(run_id, "IslandDropped", isl.index, generation), reason=why,
                                      **_island_fields(run_id, isl, generation)))]
    cmd = StartIsland(id=derive_id(run_id, "StartIsland", isl.index, generation), run_id=run_id, source=SOURCE,
                      island=isl.index, generation=generation, spec=isl.spec, recipe=recipe, num_islands=num_islands,
                      price_per_hour=isl.price_per_hour, start_step=isl.last_step if generation else 0)
    req = IslandRequested(id=derive_id(run_id, "IslandRequested", isl.index, generation),
                          **_island_fields(run_id, isl, generation))
    return [Publish(cmd), Publish(req)]


def stop(run_id: str, isl: Island, reason: str, generation: int | None = None) -> Publish:
    gen = isl.generation if generation is None else generation
    return Publish(StopIsland(id=derive_id(run_id, "StopIsland", isl.index, gen), run_id=run_id, source=SOURCE,
                              island=isl.index, generation=gen, spec=isl.spec, reason=reason,
                              price_per_hour=isl.price_per_hour))


def launch(cmd: LaunchRun, capacity: Capacity | None = None, fit: Fit | None = None) -> list[Publish]:
    """RunLaunched and every island's start; a fleet over the launcher's capacity, or a recipe far over the memory its
    islands hold (`fit`, memory_fit.py), is rejected before anything starts."""
    capacity = capacity and replace(capacity, oversubscribe=oversubscribed(cmd.recipe))     # --oversubscribe-cpus
    if capacity is not None and (why := over_capacity(cmd.fleet, capacity, "$YETO_MAX_ISLANDS of the launcher")):
        raise Reject(f"run {cmd.run_id} not launched: {why}")
    if fit is not None and (why := fit(cmd)):
        raise Reject(f"run {cmd.run_id} not launched: {why}")
    out = [Publish(cmd.caused(RunLaunched, fleet=cmd.fleet, recipe=cmd.recipe, source=SOURCE))]
    for i, spec in enumerate(cmd.fleet):
        out += start(cmd.run_id, cmd.recipe, len(cmd.fleet), Island.launched(i, spec, cmd.ts), 0)
    return out


def _event(cls: type[Event], run_id: str, isl: Island, **fields) -> Publish:
    return Publish(cls(id=derive_id(run_id, cls.__name__, isl.index, isl.generation), handle=isl.handle,
                       **_island_fields(run_id, isl, isl.generation), **fields))


def silent_after(run: RunView, isl: Island, floor_s: float = FLOOR_S) -> Bound:
    """How long the island, once it reported progress, may be silent (liveness.py: its pace, at least `floor_s`,
    heartbeat_timeout_s the cap)."""
    learner = run.learners.get(f"island-{isl.index}")
    return heartbeat_bound(LaunchRecipe.upcast(run.recipe), isl, learner.step_time_s if learner else None, floor_s)


def _needs(run: RunView, isl: Island, now: datetime, heard_since: datetime | None, floor_s: float) -> list[Publish]:
    """What one island of a running run needs now (nothing new once a final cut is under way, but drops).
    Silence counts from `heard_since` at the earliest: what the launcher could not hear (it was not running: a head
    restarted after an outage) is not the island's."""
    r, rid, cutting = run.recipe, run.run_id, run.phase == "finalizing"
    age = (now - isl.since).total_seconds() if isl.since else 0.0
    if isl.phase == "exited" and not cutting:
        gone = _event(IslandPreempted, rid, isl, reason=isl.exit_detail or "the island's processes ended")
        # SkyPilot recovers a preempted managed job by itself: cancel it, its replacement is a new job
        return [gone] if backend_of(isl.spec) == "local" else [gone, stop(rid, isl, "preempted")]
    if isl.phase == "up" and not cutting:
        beat = (now - isl.last_beat).total_seconds() if isl.last_beat else None
        heard = beat if beat is None or heard_since is None else min(beat, (now - heard_since).total_seconds())
        if heard is not None and heard > (bound := silent_after(run, isl, floor_s)).seconds:
            return [_event(IslandPreempted, rid, isl, reason=f"no progress for {beat:.0f}s (bound {bound.seconds:.0f}s: "
                                                             f"{bound.why})"), stop(rid, isl, "silent")]
        if beat is None and age > setting(r, "startup_timeout_s"):
            return [_event(IslandPreempted, rid, isl, reason=f"no progress {age:.0f}s after start"), stop(rid, isl, "silent")]
    if isl.phase == "preempted" and not cutting:
        if isl.crashes >= setting(r, "max_crashes"):
            return [_event(IslandDropped, rid, isl, reason=f"crashed {isl.crashes} times before any progress; "
                                                           f"see `yeto logs {rid} --island {isl.index}`")]
        return start(rid, r, len(run.islands), isl, isl.generation + 1)
    if isl.phase == "replacing" and age > setting(r, "recover_timeout_s"):
        reason = f"not back within --recover-timeout {setting(r, 'recover_timeout_s'):.0f}s"
        return [_event(IslandDropped, rid, isl, reason=reason), stop(rid, isl, "dropped")]
    return []


def reconcile(run: RunView, now: datetime, heard_since: datetime | None = None, floor_s: float = FLOOR_S) -> list[Publish]:
    """What the run needs now: replacements, drops, and teardown once it has ended."""
    if run.ended:   # a cloud island's job may outlive its exit (SkyPilot recovering it): cancelled as well
        return [stop(run.run_id, isl, f"run ended ({run.ended})") for isl in run.islands
                if isl.phase in ("up", "replacing") or (isl.phase == "exited" and backend_of(isl.spec) != "local")]
    return [p for isl in run.islands
            for p in _needs(run, isl, now, heard_since, floor_s) + external.needs(run, isl, source=SOURCE)]


def move(state: State, cmd: MoveIsland) -> list[Publish]:
    """The planner's answer to a refused start: the island's next generation on another offer (its GPU shape elsewhere,
    or another that holds the model; its IslandRequested carries the planner's reason). Ignored unless the island
    still waits for the generation before `cmd.generation` (refused, not yet up)."""
    run = state.get(cmd.run_id)
    isl = run.islands[cmd.island] if run and not run.ended and cmd.island < len(run.islands) else None
    if run is None or isl is None or isl.generation != cmd.generation - 1 or isl.phase not in ("requested", "replacing"):
        return []
    moved = replace(isl, spec={**cmd.spec, "price_per_hour": cmd.price_per_hour},
                    meter=replace(isl.meter, price_per_hour=cmd.price_per_hour))
    return [replace(p, msg=p.msg.model_copy(update={"reason": cmd.reason[:600]})) if isinstance(p.msg, IslandRequested) else p
            for p in start(run.run_id, run.recipe, len(run.islands), moved, cmd.generation)]  # the move's why, for status


def decide(state: State, msg: Message | None, now: datetime, capacity: Capacity | None = None,
           fit: Fit | None = None, heard_since: datetime | None = None, floor_s: float = FLOOR_S) -> list:
    """`capacity`: what this launcher may start; `fit`: why a LaunchRun's recipe cannot fit its islands' memory;
    `heard_since`: when this launcher started; `floor_s`: the silence bound's floor (liveness.py) (all bound in by
    wiring.py; None = no check, for pure tests)."""
    if isinstance(msg, LaunchRun):
        return launch(msg, capacity, fit)
    if isinstance(msg, MoveIsland):
        return move(state, msg)
    if isinstance(msg, StartIsland):
        run = state.get(msg.run_id)
        isl = run.islands[msg.island] if run and msg.island < len(run.islands) else None
        superseded = isl is not None and (isl.generation > msg.generation or isl.phase in ("dropped", "stopped"))
        stale = run is not None and (bool(run.ended) or superseded)
        return [] if stale else [Spawn(msg)]
    if isinstance(msg, StopIsland):
        return [Kill(msg, recorded_handle(state, msg.run_id, msg.island, msg.generation))]
    runs = [state[msg.run_id]] if msg is not None and msg.run_id in state else list(state.values()) if msg is None else []
    return [p for run in runs for p in reconcile(run, now, heard_since, floor_s)]
