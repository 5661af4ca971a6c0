"""The events SyncerCore reports, each with the id derived from what it reports (a redelivered push or a
replayed round yields the same id, so the bus drops the copy)."""
from __future__ import annotations

import numpy as np

from yeto.schemas.base import derive_id
from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.training import (
    FragmentRestored,
    GlobalVersionPublished,
    LearnerJoined,
    LearnerRejected,
    RoundAborted,
    RoundMerged,
)
from yeto.services.syncer.admission import Rejection
from yeto.services.syncer.merge import Combination
from yeto.services.syncer.rounds import MergeNow


class Reports:
    def __init__(self, run_id: str, source: str) -> None:
        self.run_id, self.source = run_id, source

    def rejected(self, h: FragmentHeader, why: Rejection) -> LearnerRejected:
        return LearnerRejected(id=derive_id(self.run_id, "LearnerRejected", h.learner, h.generation, h.fragment, h.kind,
                                            h.local_step, h.chunk, why.reason), run_id=self.run_id, source=self.source,
                               learner=h.learner, generation=h.generation, fragment=h.fragment, reason=why.reason,
                               detail=why.detail)

    def joined(self, h: FragmentHeader) -> LearnerJoined:
        return LearnerJoined(id=derive_id(self.run_id, "LearnerJoined", h.learner, h.generation), run_id=self.run_id,
                             source=self.source, learner=h.learner, generation=h.generation, fingerprint=h.fingerprint)

    def aborted(self, p: int, version: int, headers: list[FragmentHeader]) -> RoundAborted:
        learners = [h.learner for h in headers]
        return RoundAborted(id=derive_id(self.run_id, "RoundAborted", p, version, *learners), run_id=self.run_id,
                            source=self.source, fragment=p, global_version=version, responders=learners,
                            reason="the merged result is not finite; the fragment keeps its version")

    def merged(self, p: int, version: int, headers: list[FragmentHeader], weights: np.ndarray, lags: list[int],
               credits: list[int], m: MergeNow, seconds: float, combo: Combination) -> RoundMerged:
        return RoundMerged(id=derive_id(self.run_id, "RoundMerged", p, version), run_id=self.run_id, source=self.source,
                           fragment=p, global_version=version, responders=[h.learner for h in headers],
                           weights=[float(w) for w in weights], staleness=lags, tokens=sum(credits), grace_ms=m.grace_ms,
                           quorum_ms=m.quorum_ms, merge_ms=1e3 * seconds, delta_norm=combo.delta_norm, merge=combo.merge,
                           momentum_cos=combo.momentum_cos, momentum_restarted=combo.restarted)

    def published(self, p: int, version: int, messages: list[tuple[FragmentHeader, bytes]]) -> GlobalVersionPublished:
        return GlobalVersionPublished(id=derive_id(self.run_id, "GlobalVersionPublished", p, version), run_id=self.run_id,
                                      source=self.source, fragment=p, global_version=version,
                                      keyframe=any(h.kind == "keyframe" for h, _ in messages),
                                      num_bytes=sum(len(payload) for _, payload in messages))

    def restored(self, p: int, snapshot_version: int, published_version: int, version: int) -> FragmentRestored:
        return FragmentRestored(id=derive_id(self.run_id, "FragmentRestored", p, version), run_id=self.run_id,
                                source=self.source, fragment=p, snapshot_version=snapshot_version,
                                published_version=published_version, global_version=version)
