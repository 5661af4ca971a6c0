"""A resumed or branched run's first versions: its fragments seeded from the parent artifact's final snapshots.

`yeto launch --resume-from / --branch-from` puts `seed` (the parent artifact's directory) and `seed_momentum`
(resume: the outer momentum goes on; branch: it starts at zero) into the run's sync recipe. The first time the
data plane meets the run with no snapshot of its own, the fragments are restored from the artifact's
`resume.frag-*.safetensors` (services/finalizer/resume_state.py) without the parent's learner ledger (its learners
are not this run's), snapshotted as this run's, and broadcast as exact f32 keyframes that the learners join from.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from yeto.services.syncer import snapshot
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.outputs import Broadcast, SaveSnapshot

PREFIX = "resume."          # services/finalizer/resume_state.py's names: resume.frag-<p>.safetensors


def read(directory: Path, owned: frozenset[int] | None, momentum: bool) -> dict[int, snapshot.FragmentSnapshot]:
    """The parent's final fragments this instance owns; momentum zeroed for a branch. ValueError if there are none."""
    paths = sorted(Path(directory).glob(f"{PREFIX}frag-*.safetensors"))
    if not paths:
        raise ValueError(f"{directory} holds no resume.frag-*.safetensors: not an artifact Yeto can resume or branch from")
    snaps = (snapshot.read(p) for p in paths)
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
