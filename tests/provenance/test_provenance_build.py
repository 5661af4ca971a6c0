"""The finalizer's BuildArtifact carries what the manifest's provenance records of the run (each island's hardware and
generations, the rounds merged, each learner's furthest step), decided from the tape alone; ArtifactWritten carries
the signer's public key, and both read their v1 fixtures with the new fields empty."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from functools import reduce
from pathlib import Path

from yeto.infra.runner import Publish
from yeto.schemas import parse
from yeto.schemas.final import BuildArtifact, CheckpointMarkedFinal, FinalCutDone, FinalCutRequested
from yeto.schemas.fleet import IslandReplaced, IslandUp, RunLaunched
from yeto.schemas.training import LearnerProgress, RoundMerged
from yeto.services.finalizer.logic import make_decide
from yeto.services.finalizer.state import evolve

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
SPECS = [{"cloud": "aws", "gpu": "A100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True, "price_per_hour": 9.0},
         {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False, "price_per_hour": 0.0}]
FIXTURES = Path(__file__).resolve().parents[2] / "schemas" / "fixtures"


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def progress(learner: str, generation: int, step: int, eval_loss: float | None = None) -> LearnerProgress:
    return LearnerProgress(run_id="r1", learner=learner, generation=generation, step=step, loss=1.0, tokens=10 * step,
                           tokens_per_s=1.0, step_time_s=1.0, lr=1e-4, eval_loss=eval_loss, ts=at(7))


def test_build_artifact_carries_the_fleet_generations_rounds_and_steps():
    events = [RunLaunched(run_id="r1", fleet=SPECS, recipe={}, ts=T0),
              *[IslandUp(run_id="r1", island=i, spec=SPECS[i], ts=at(1)) for i in (0, 1)],
              IslandReplaced(run_id="r1", island=1, generation=1, previous_generation=0, spec=SPECS[1], ts=at(5)),
              *[RoundMerged(run_id="r1", fragment=0, global_version=v, responders=["island-0"], weights=[1.0],
                            staleness=[0], tokens=10, grace_ms=0.0, quorum_ms=1.0, merge_ms=1.0, delta_norm=0.1,
                            merge="rda", ts=at(6)) for v in (1, 2, 3)],
              progress("island-0", 0, 29, eval_loss=1.5), progress("island-0", 0, 30), progress("island-1", 1, 12),
              FinalCutRequested(run_id="r1", reason="user", ts=at(8)),
              FinalCutDone(run_id="r1", versions={0: 3}, snapshot_path="/s", sha256="x", ts=at(9)),
              CheckpointMarkedFinal(run_id="r1", versions={0: 3}, snapshot_path="/s", sha256="x", ts=at(10))]
    state = reduce(evolve, events, {})
    (build,) = [i.msg for i in make_decide(5.0)(state, None, at(100)) if isinstance(i, Publish)
                and isinstance(i.msg, BuildArtifact)]
    assert build.fleet == [{"island": 0, "cloud": "aws", "gpu": "A100", "count": 8, "nodes": 1, "region": "us-east-2",
                            "spot": True, "generations": 1},
                           {"island": 1, "cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None,
                            "spot": False, "generations": 2}]
    assert (build.rounds_merged, build.learner_steps) == (3, {"island-0": 30, "island-1": 12})
    assert build.learner_losses == {"island-0": 1.0, "island-1": 1.0}      # the last loss each reported: the card's
    assert build.learner_eval_losses == {"island-0": 1.5}                   # the last held-out loss, when measured


def test_v1_build_artifact_and_artifact_written_read_with_the_new_fields_empty():
    build = parse((FIXTURES / "BuildArtifact.v1.json").read_bytes())
    assert (build.version, build.fleet, build.rounds_merged, build.learner_steps, build.learner_losses) == (3, [], 0, {}, {})
    assert parse((FIXTURES / "BuildArtifact.v2.json").read_bytes()).learner_eval_losses == {}
    written = parse((FIXTURES / "ArtifactWritten.v1.json").read_bytes())
    assert (written.version, written.signer_public_key) == (2, "")
    assert json.loads((FIXTURES / "ArtifactWritten.v2.json").read_text())["signer_public_key"] == "2" * 64
