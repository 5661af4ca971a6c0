"""Subjects route to the intended streams, and the global streams are per chunk, so a stream's per-subject
limit counts versions of a chunk, not chunks of one big delta."""
from __future__ import annotations

from yeto.schemas.subjects import (
    STREAMS,
    delta_subject,
    event_subject,
    fragment_subject,
    keyframe_subject,
    learner_event_subject,
    run_events,
    stream_for,
    subject_matches,
)


def test_every_subject_lands_in_exactly_its_stream():
    cases = {event_subject("r1", "RunLaunched"): "YETO_EVT",
             learner_event_subject("r1", "LearnerProgress", "island-0"): "YETO_EVT", fragment_subject("r1", 3): "YETO_FRAG",
             keyframe_subject("r1", 3, 0): "YETO_GKEY", keyframe_subject("r1", 3, 140): "YETO_GKEY",
             delta_subject("r1", 3, 0): "YETO_GDELTA", delta_subject("r1", 3, 140): "YETO_GDELTA"}
    for subject, stream in cases.items():
        assert stream_for(subject).name == stream, subject
        assert sum(any(subject_matches(p, subject) for p in spec.subjects) for spec in STREAMS) == 1, subject


def test_deltas_of_one_fragment_have_a_subject_per_chunk():
    assert len({delta_subject("r1", 0, c) for c in range(200)}) == 200
    gdelta = next(s for s in STREAMS if s.name == "YETO_GDELTA")
    assert gdelta.max_msgs_per_subject >= 16, "enough versions of every chunk for a joining learner"


def test_a_learners_own_events_name_it_and_run_filters_still_see_them():
    mine = learner_event_subject("r1", "LearnerFinalAck", "island-0")
    assert mine == "yeto.evt.r1.LearnerFinalAck.island-0"
    assert subject_matches(run_events("r1"), mine) and subject_matches(learner_event_subject("r1", "LearnerFinalAck"), mine)
    assert not subject_matches(learner_event_subject("r1", "LearnerFinalAck", "island-1"), mine)
    assert not subject_matches(event_subject("r1", "LearnerFinalAck"), mine), "the bare type subject is another subject"
