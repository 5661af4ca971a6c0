"""A resumed or branched run's first versions: its fragments seeded from the parent artifact's final snapshots.

`yeto launch --resume-from / --branch-from` puts `seed` (the parent artifact's directory) and `seed_momentum`
(resume: the outer momentum goes on; branch: it starts at zero) into the run's sync recipe. The first time the
data plane meets the run with no snapshot of its own, the fragments are restored from the parent output folder's
`resume/frag-*.safetensors` (services/finalizer/resume_state.py; a flat folder finalized before `resume/` holds them
as `resume.frag-*.safetensors`) without the parent's learner ledger (its learners are not this run's), snapshotted
as this run's, and broadcast as exact f32 keyframes that the learners join from.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from yeto.schemas.artifact_layout import FLAT_RESUME_PREFIX, RESUME
from yeto.services.syncer import snapshot
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.outputs import Broadcast, SaveSnapshot


def paths(directory: Path) -> list[Path]:
    """The parent's fragment snapshots: `resume/frag-*` (schemas/artifact_layout.py), else a flat folder's."""
    return sorted((Path(directory) / RESUME).glob("frag-*.safetensors")) or \
        sorted(Path(directory).glob(f"{FLAT_RESUME_PREFIX}frag-*.safetensors"))


def read(directory: Path, owned: frozenset[int] | None, momentum: bool) -> dict[int, snapshot.FragmentSnapshot]:
    """The parent's final fragments this instance owns; momentum zeroed for a branch. ValueError if there are none."""
    found = paths(directory)
    if not found:
        raise ValueError(f"{directory} holds no {RESUME}/frag-*.safetensors: not a run output folder Yeto can resume "
                         f"or branch from")
    snaps = (snapshot.read(p) for p in found)
    return {s.fragment: replace(s, ledger={}, momentum=s.momentum if momentum else np.zeros_like(s.momentum))
            for s in snaps if owned is None or s.fragment in owned}


def seed(core: SyncerCore, sync: dict, now: float) -> list:
    """Restore `core` from the run's seed (if its recipe names one); the snapshots and keyframes to send."""
    if not sync.get("seed"):
        return []
    snaps = read(Path(sync["seed"]).expanduser(), core.owned, bool(sync.get("seed_momentum", True)))
    core.restore(snaps, now)
    out: list = []
    for p in sorted(snaps):
        out.append(SaveSnapshot(core.snapshot(p)))       # a syncer restarted later resumes from its own snapshots
        keyframe = core.fragments[p].exact_keyframe()
        out += [Broadcast(*keyframe), core.report.published(p, core.fragments[p].version, [keyframe])]
    return out
