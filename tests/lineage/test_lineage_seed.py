"""What an output folder carries and how a run starts from it, on the real parts: the final cut's fragment snapshots
copied into its `resume/`, beside `artifact/` (resume_state.write), `manifest["resume"]` (describe), and the real
SyncerCore seeded from them (seed.py), or from a flat folder finalized before `resume/`: θ and the outer momentum for
a resume, zero momentum for a branch, never the parent's ledger, snapshotted as the new run's own and broadcast as
exact f32 keyframes."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import learner_tiny
from yeto.schemas import codecs
from yeto.schemas.recipe import SyncConfig
from yeto.services.finalizer import resume_state
from yeto.services.syncer import seed, snapshot
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.outputs import Broadcast, SaveSnapshot

RECIPE = {"train": {"model": "m", "lora_r": 16, "lora_alpha": 32, "sync": {"num_fragments": 2}},
          "data_check": {"fingerprint": "f" * 64}}


@pytest.fixture()
def artifact(tmp_path):
    """An artifact folder holding the tiny model's tokenizer and two fragments' final snapshots of run r-a."""
    rng = np.random.default_rng(0)
    snaps = tmp_path / "syncer" / "r-a"
    for p, last in ((0, 28), (1, 30)):
        theta, momentum = rng.normal(size=50 + p).astype(np.float32), rng.normal(size=50 + p).astype(np.float32)
        snapshot.write(snaps, snapshot.FragmentSnapshot(fragment=p, version=7 + p, fingerprint="fp", theta=theta,
                                                        momentum=momentum, shadow=theta * 0,
                                                        ledger={"island-0": {"generation": 0, "last_step": last}}))
    out = tmp_path / "output"
    learner_tiny.write_model_dir(out / "artifact")          # the deployable folder holds the tokenizer
    files = resume_state.write(out, snaps)
    return out, files, snapshot.read_all(snaps)


@pytest.fixture()
def flat(artifact, tmp_path):
    """The same parent in the flat layout a run finalized before `artifact/` and `resume/` wrote."""
    out, files, parent = artifact
    old = tmp_path / "flat"
    old.mkdir()
    for name in files:
        shutil.copyfile(out / name, old / name.replace("resume/", "resume."))
    return old, parent


def test_the_artifact_carries_the_final_snapshots_and_what_a_resume_is_checked_against(artifact):
    out, files, _ = artifact
    assert files == ["resume/frag-0000.safetensors", "resume/frag-0001.safetensors"]
    assert sorted(p.name for p in out.iterdir()) == ["artifact", "resume"]      # beside, not among, the adapter
    resume = resume_state.describe(out, files, RECIPE)
    assert resume["layout_fingerprint"] == "fp" and resume["versions"] == {"0": 7, "1": 8}
    assert resume["learner_steps"] == {"island-0": 30} and resume["start_step"] == 30
    assert resume["key"]["train.lora_r"] == 16 and resume["key"]["data_fingerprint"] == "f" * 64
    assert len(resume["key"]["tokenizer_sha256"]) == 64 and resume["files"] == files
    assert resume_state.write(out, out / "no-such-folder") == []


@pytest.mark.parametrize("layout", ["output", "flat"])
@pytest.mark.parametrize("momentum", [True, False], ids=["resume", "branch"])
def test_a_seeded_syncer_starts_at_the_parents_theta_and_momentum_and_broadcasts_exact_keyframes(artifact, flat,
                                                                                                 momentum, layout):
    out, parent = (artifact[0], artifact[2]) if layout == "output" else flat
    core = SyncerCore(SyncConfig(num_fragments=2), run_id="r-b")
    outputs = seed.seed(core, {"seed": str(out), "seed_momentum": momentum}, now=0.0)
    for p, s in parent.items():
        frag = core.fragments[p]
        assert frag.version == s.version and np.array_equal(frag.theta, s.theta)
        assert np.array_equal(frag.rows.momentum, s.momentum if momentum else np.zeros_like(s.momentum))
    assert core.fingerprint == "fp" and not core.learners.entries(0), "the parent's learners came along"
    saved = [o.snapshot for o in outputs if isinstance(o, SaveSnapshot)]
    assert [(s.fragment, s.ledger) for s in saved] == [(0, {}), (1, {})]
    keyframes = [o for o in outputs if isinstance(o, Broadcast)]
    assert [(k.header.run_id, k.header.kind, k.header.version) for k in keyframes] == \
        [("r-b", "keyframe", 7), ("r-b", "keyframe", 8)]
    for k in keyframes:
        assert np.array_equal(codecs.codec(k.header.codec).decode(k.payload, k.header.numel), parent[k.header.fragment].theta)


def test_no_seed_is_no_change_and_a_folder_without_resume_files_is_refused(tmp_path):
    core = SyncerCore(SyncConfig(num_fragments=2), run_id="r-b")
    assert seed.seed(core, {}, now=0.0) == [] and not core.fragments
    with pytest.raises(ValueError, match="holds no resume/frag"):
        seed.seed(core, {"seed": str(tmp_path)}, now=0.0)
