"""The syncer's control-plane fold: a final cut is asked for once per run and shard, and only the shard's
own FinalCutDone ends it (another shard's report must not cancel a cut this shard has not made)."""
from __future__ import annotations

from functools import reduce

from yeto.schemas.fleet import RunLaunched
from yeto.schemas.final import FinalCutDone, FinalCutRequested
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
