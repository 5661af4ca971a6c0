"""The syncer's control-plane fold: a final cut is asked for once per run and shard, and only the shard's
own FinalCutDone ends it (another shard's report must not cancel a cut this shard has not made)."""
from __future__ import annotations

from functools import reduce

from yeto.schemas.final import FinalCutDone, FinalCutRequested
from yeto.schemas.fleet import RunLaunched
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
    events = [*launched, request, FinalCutRequested(run_id="r2", reason="budget"), done]
    state = reduce(runs.evolve, events, runs.SyncerState(shard=(1, 2)))
    assert state.runs["r1"].cut_requested == request and state.cut_done("r2") and not state.cut_done("r1")
    assert runs.load(runs.dump(state), shard=(1, 2)) == state
    assert runs.load(runs.dump(runs.SyncerState())) == runs.SyncerState()
    other = runs.load(runs.dump(state), shard=(0, 2))           # every shard resumes from the one snapshot
    assert other == reduce(runs.evolve, events, runs.SyncerState(shard=(0, 2))) and not other.cut_done("r2")
    later = [FinalCutDone(run_id="r1", versions={1: 4}, snapshot_path="/s", sha256="c", shard=1, num_shards=2)]
    snapshot = runs.dump(reduce(runs.evolve, events[:3], runs.SyncerState(shard=(1, 2))))
    resumed = reduce(runs.evolve, later, runs.load(snapshot, (1, 2)))
    assert resumed == reduce(runs.evolve, events[:3] + later, runs.SyncerState(shard=(1, 2)))
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
