"""The syncer's control-plane fold: a final cut is asked for once per run and shard, and only the shard's
own FinalCutDone ends it (another shard's report must not cancel a cut this shard has not made)."""
from __future__ import annotations

from functools import reduce

from yeto.schemas.final import FinalCutDone, FinalCutRequested
from yeto.schemas.fleet import IslandReplaced, IslandUp, RunLaunched
from yeto.services.syncer import runs

SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": "", "spot": False}


def test_each_shard_cuts_until_its_own_final_cut_done():
    request = FinalCutRequested(run_id="r1", reason="user")
    events = [RunLaunched(run_id="r1", fleet=[SPEC], recipe={"train": {"sync": {"num_fragments": 4}}}), request]
    other = FinalCutDone(run_id="r1", versions={1: 3}, snapshot_path="/s", sha256="b", shard=1, num_shards=2)
    mine = FinalCutDone(run_id="r1", versions={0: 3}, snapshot_path="/s", sha256="a", shard=0, num_shards=2)
    state = reduce(runs.evolve, [*events, other], runs.SyncerState(shard=(0, 2)))
    assert [i.request.id for i in runs.decide(state, None, 0.0)] == [request.id]
    state = runs.evolve(state, mine)
    assert runs.decide(state, None, 0.0) == [] and state.shard == (0, 2)
    single = reduce(runs.evolve, [*events, FinalCutDone(run_id="r1", versions={0: 3}, snapshot_path="/s", sha256="a")],
                    runs.SyncerState())
    assert runs.decide(single, None, 0.0) == [], "an unsharded syncer's own report (shard 0 of 1) ends its cut"


def test_snapshot_codec_round_trips_exactly_and_resumes_like_a_full_replay():
    request = FinalCutRequested(run_id="r1", reason="user", detail="done")
    launched = [RunLaunched(run_id=r, fleet=[SPEC], recipe={"train": {"sync": {"num_fragments": 4, "outer_lr": 0.7}}})
                for r in ("r1", "r2")]
    done = FinalCutDone(run_id="r2", versions={1: 3}, snapshot_path="/s", sha256="b", shard=1, num_shards=2)
    islands = [IslandUp(run_id="r1", island=0, spec={**SPEC, "count": 2}), IslandUp(run_id="r1", island=1, spec=SPEC),
               IslandReplaced(run_id="r1", island=1, generation=1, spec=SPEC, previous_generation=0)]
    events = [*launched, request, *islands, FinalCutRequested(run_id="r2", reason="budget"), done]
    state = reduce(runs.evolve, events, runs.SyncerState(shard=(1, 2)))
    assert state.runs["r1"].cut_requested == request and state.cut_done("r2") and not state.cut_done("r1")
    r1 = state.runs["r1"]
    assert r1.generations == {"island-0": 0, "island-1": 1} and r1.ranks == {"island-0": 2, "island-1": 1}
    assert runs.load(runs.dump(state), shard=(1, 2)) == state
    assert runs.load(runs.dump(runs.SyncerState())) == runs.SyncerState()
    other = runs.load(runs.dump(state), shard=(0, 2))           # every shard resumes from the one snapshot
    assert other == reduce(runs.evolve, events, runs.SyncerState(shard=(0, 2))) and not other.cut_done("r2")
    later = [FinalCutDone(run_id="r1", versions={1: 4}, snapshot_path="/s", sha256="c", shard=1, num_shards=2)]
    snapshot = runs.dump(reduce(runs.evolve, events[:6], runs.SyncerState(shard=(1, 2))))
    resumed = reduce(runs.evolve, later, runs.load(snapshot, (1, 2)))
    assert resumed == reduce(runs.evolve, events[:6] + later, runs.SyncerState(shard=(1, 2)))
    assert runs.decide(resumed, None, 0.0) == []


def test_the_syncer_service_snapshots_its_runs_with_that_codec_as_its_own_shard(tmp_path):
    from yeto.services.syncer.dataplane import DataPlane
    from yeto.services.syncer.wiring import spec

    events = [RunLaunched(run_id="r1", fleet=[SPEC], recipe={"sync": {"quorum": 2}}),
              FinalCutRequested(run_id="r1", reason="user"),
              FinalCutDone(run_id="r1", versions={0: 3}, snapshot_path="/s", sha256="a", shard=0, num_shards=2)]
    written = reduce(runs.evolve, events, runs.SyncerState(shard=(0, 2)))
    codec = spec(DataPlane(state_dir=tmp_path, shard=(1, 2))).codec
    assert codec.version == runs.CODEC_VERSION
    resumed = codec.load(codec.dump(written))
    assert resumed == reduce(runs.evolve, events, runs.SyncerState(shard=(1, 2))) and runs.decide(resumed, None, 0.0) != []


def test_announcements_fold_into_the_roster_and_hostile_recipes_do_not_break_it():
    launched = RunLaunched(run_id="r1", fleet=[SPEC], recipe={"train": {"micro_batch": 8, "seq_len": 128, "sync": {"quorum": 1}}})
    late = IslandUp(run_id="r1", island=0, generation=0, spec=SPEC)          # an old announcement after a newer one
    state = reduce(runs.evolve, [launched, IslandReplaced(run_id="r1", island=0, generation=2, spec=SPEC, previous_generation=1),
                                 late, IslandUp(run_id="ghost", island=0, spec=SPEC)], runs.SyncerState())
    info = state.runs["r1"]
    assert info.generations == {"island-0": 2} and info.tokens_per_step == 8 * 1 * 128 and "ghost" not in state.runs
    hostile = RunLaunched.model_construct(run_id="r2", fleet=[SPEC], recipe={"train": "x", "sync": ["no"]})
    info = runs.evolve(state, hostile).runs["r2"]
    assert info.sync == {} and info.tokens_per_step == 4 * 1 * 512, "the recipe's defaults where it is not a mapping"
