"""The finalizer's pure projections: spend, budget cutoff within one accounting period, the final-cut machine."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest

from yeto.infra.runner import Publish, Retry
from yeto.schemas.commands import StopRun
from yeto.schemas.final import (
    ArtifactWritten,
    BuildArtifact,
    CheckpointMarkedFinal,
    FinalCutDone,
    FinalCutRequested,
    LearnerFinalAck,
    MarkFinal,
    RunFailed,
    RunFinalized,
    RunStopped,
)
from yeto.schemas.fleet import (
    IslandDropped,
    IslandExited,
    IslandRequested,
    IslandStopped,
    IslandUp,
    RunLaunched,
    StopIsland,
)
from yeto.schemas.offers import OfferRefused, ReplanFailed
from yeto.services.finalizer.logic import make_decide, run_spend
from yeto.services.finalizer.state import evolve

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
PERIOD = 5.0
decide = make_decide(PERIOD)
SPEC = {"cloud": "aws", "gpu": "A100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True}


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def published(intents) -> list:
    return [i.msg for i in intents if isinstance(i, Publish)]


def launched(limits: dict, n: int = 2, **recipe) -> list:
    return [RunLaunched(run_id="r1", fleet=[SPEC] * n, recipe={"limits": limits, **recipe}, ts=T0)]


def up(island: int, price: float, t: float = 0.0, gen: int = 0):
    return IslandUp(run_id="r1", island=island, generation=gen, spec=SPEC, price_per_hour=price, ts=at(t))


def fold(events) -> dict:
    return reduce(evolve, events, {})


def test_spend_is_price_times_uptime_and_stops_when_the_island_stops():
    state = fold(launched({}) + [up(0, 36.0), up(1, 72.0, t=100),
                                 IslandStopped(run_id="r1", island=0, spec=SPEC, price_per_hour=36.0, ts=at(200))])
    # island 0: 200 s at $36/h = $2; island 1: 200 s at $72/h = $4 (still up at t=300)
    assert run_spend(state["r1"], at(300)) == pytest.approx(6.0)


def test_budget_cutoff_happens_before_spend_passes_the_cap_by_more_than_one_period():
    cap, price = 1.0, 360.0                       # $0.1 per second: the cap is reached at t=10 s
    events = launched({"max_spend": cap}, n=1) + [up(0, price)]
    t, cut_at = 0.0, None
    while cut_at is None:
        t += PERIOD
        out = published(decide(fold(events), None, at(t)))
        if out:
            cut_at = t
    assert [type(m) for m in out] == [FinalCutRequested] and out[0].reason == "budget"
    spent = run_spend(fold(events)["r1"], at(cut_at))
    assert spent <= cap                                       # it cut before crossing ...
    assert spent + price * PERIOD / 3600 >= cap               # ... and not more than one period early


def test_head_price_counts_toward_the_budget():
    state = fold(launched({"max_spend": 1.0}, n=1, head_price_per_hour=36.0))   # $0.01/s: the cap at t=100 s
    assert published(decide(state, None, at(94))) == []
    assert [m.reason for m in published(decide(state, None, at(95.5)))] == ["budget"]


@pytest.mark.parametrize("limits, progress_tokens, t, reason", [
    ({"max_tokens": 100}, 100, 1, "max_tokens"),
    ({"max_time_s": 60}, 0, 60, "max_time"),
])
def test_token_and_time_limits_request_the_final_cut(limits, progress_tokens, t, reason):
    from yeto.schemas.training import LearnerProgress

    beat = LearnerProgress(run_id="r1", learner="island-0", step=1, loss=1, tokens=progress_tokens, tokens_per_s=1,
                           step_time_s=1, lr=1e-3, ts=at(0.5))
    events = launched(limits, n=1) + [up(0, 0.0), beat]
    assert [m.reason for m in published(decide(fold(events), None, at(t)))] == [reason]


def test_every_island_finished_or_dropped_means_max_steps_and_all_dropped_means_failure():
    ended = [IslandExited(run_id="r1", island=0, spec=SPEC, exit_code=0, ts=at(5)),
             IslandDropped(run_id="r1", island=1, spec=SPEC, reason="gone", ts=at(6))]
    assert [m.reason for m in published(decide(fold(launched({}) + [up(0, 1), up(1, 1)] + ended), None, at(7)))] == ["max_steps"]
    dropped = [IslandDropped(run_id="r1", island=i, spec=SPEC, reason="gone", ts=at(6)) for i in (0, 1)]
    assert [type(m) for m in published(decide(fold(launched({}) + dropped), None, at(7)))] == [RunFailed]


def test_an_island_no_offer_can_place_does_not_hold_back_a_max_steps_cut_of_the_others():
    """Island 1's cloud refused it and the planner found no other offer (ReplanFailed): once island 0 trained to
    --max-steps the run is cut, saying which island was never placed; without the ReplanFailed, or once the island
    moved to another offer, the run waits for it as before."""
    refused = OfferRefused(run_id="r1", island=1, cloud="aws", region="us-east-2", gpu="A100", count=8,
                           cause="capacity", reason="InsufficientInstanceCapacity", ts=at(1))
    failed = ReplanFailed(run_id="r1", island=1, refused=refused.id, reason="no other region of 8xA100 is left",
                          advice="drop it from --gpu", ts=at(2))
    done = IslandExited(run_id="r1", island=0, spec=SPEC, exit_code=0, ts=at(5))
    base = launched({}) + [up(0, 1), refused]
    (cut,) = published(decide(fold(base + [failed, done]), None, at(7)))
    assert cut.reason == "max_steps" and "never placed: island 1" in cut.detail, cut
    assert published(decide(fold(base + [done]), None, at(7))) == []          # the planner may still place it
    moved = IslandRequested(run_id="r1", island=1, generation=1, spec={**SPEC, "region": "us-west-2"}, ts=at(3))
    assert published(decide(fold(base + [failed, moved, done]), None, at(7))) == []


def _through_mark(extra=()) -> list:
    return launched({}) + [up(0, 0.0), up(1, 0.0),
                           FinalCutRequested(run_id="r1", reason="user", ts=at(10)),
                           FinalCutDone(run_id="r1", versions={0: 5, 1: 5}, snapshot_path="/s", sha256="x", ts=at(11)),
                           *extra]


def test_final_cut_machine_marks_after_the_cut_then_builds_once_every_live_learner_acked():
    assert [type(m) for m in published(decide(fold(_through_mark()), None, at(12)))] == [MarkFinal]
    marked = _through_mark([CheckpointMarkedFinal(run_id="r1", versions={0: 5, 1: 5}, snapshot_path="/s", sha256="x", ts=at(12))])
    assert published(decide(fold(marked), None, at(13))) == []               # waiting for acks
    acks = [LearnerFinalAck(run_id="r1", learner=f"island-{i}", versions={0: 5, 1: 5}, ts=at(13)) for i in (0, 1)]
    out = published(decide(fold(marked + acks), None, at(14)))
    assert [type(m) for m in out] == [BuildArtifact, StopIsland, StopIsland]
    assert out[0].acked == ["island-0", "island-1"]


def test_a_learner_that_never_acks_does_not_block_finalization():
    marked = _through_mark([CheckpointMarkedFinal(run_id="r1", versions={0: 5}, snapshot_path="/s", sha256="x", ts=at(12)),
                            LearnerFinalAck(run_id="r1", learner="island-0", versions={0: 5}, ts=at(13))])
    assert published(decide(fold(marked), None, at(12 + 29))) == []
    out = published(decide(fold(marked), None, at(12 + 30)))
    assert [type(m) for m in out][0] == BuildArtifact and out[0].acked == ["island-0"]
    written = marked + [ArtifactWritten(run_id="r1", output="/o", local_path="/o", artifact_kind="adapter", files=[],
                                        manifest_sha256="m", ts=at(45))]
    final = published(decide(fold(written), None, at(46)))
    assert [type(m) for m in final] == [RunFinalized]
    assert (final[0].reason, final[0].acked, final[0].missing_acks) == ("user", ["island-0"], ["island-1"])
    assert published(decide(fold(written + final), None, at(47))) == []      # ended: nothing more


def test_the_syncer_not_answering_the_cut_fails_the_run_after_the_timeout():
    events = launched({}, final_cut_timeout_s=100) + [FinalCutRequested(run_id="r1", reason="user", ts=at(10))]
    assert published(decide(fold(events), None, at(110))) == []
    assert [type(m) for m in published(decide(fold(events), None, at(111)))] == [RunFailed]


def test_yeto_down_is_a_final_cut_and_down_now_aborts_and_stops_islands():
    state = fold(launched({}) + [up(0, 1.0), up(1, 1.0)])
    graceful = published(decide(state, StopRun(run_id="r1"), at(5)))
    assert [(type(m), m.reason) for m in graceful] == [(FinalCutRequested, "user")]
    now = published(decide(state, StopRun(run_id="r1", now=True), at(5)))
    assert [type(m) for m in now] == [RunStopped, StopIsland, StopIsland]
    with pytest.raises(Retry):
        decide({}, StopRun(run_id="unknown"), at(5))


def test_replaying_the_events_rebuilds_the_same_projection():
    events = _through_mark([LearnerFinalAck(run_id="r1", learner="island-1", versions={}, ts=at(13))])
    assert fold(events) == fold(list(events))
    assert fold(events)["r1"].phase == "done" and fold(events)["r1"].acks == {"island-1"}


def test_a_sharded_syncers_cut_is_done_only_when_every_shard_reported_and_combines_them():
    start = launched({}) + [up(0, 0.0), up(1, 0.0), FinalCutRequested(run_id="r1", reason="user", ts=at(10))]
    half = FinalCutDone(run_id="r1", versions={0: 5, 2: 4}, snapshot_path="/s", sha256="a", shard=0, num_shards=2, ts=at(11))
    other = FinalCutDone(run_id="r1", versions={1: 6}, snapshot_path="/s", sha256="b", shard=1, num_shards=2, ts=at(12))
    assert fold(start + [half])["r1"].phase == "cutting"
    assert published(decide(fold(start + [half]), None, at(12))) == []          # no MarkFinal on half the model
    run = fold(start + [half, half, other])["r1"]                                # a redelivered report counts once
    assert run.phase == "done" and run.final["versions"] == {0: 5, 1: 6, 2: 4} and run.final["snapshot_path"] == "/s"
    (mark,) = published(decide(fold(start + [other, half]), None, at(13)))
    assert isinstance(mark, MarkFinal) and mark.versions == {0: 5, 1: 6, 2: 4}
    assert mark.sha256 == fold(start + [half, other])["r1"].final["sha256"] not in ("a", "b")
