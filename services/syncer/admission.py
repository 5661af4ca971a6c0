"""Admission: every reason a syncer refuses a message (docs/PROTOCOL.md, admission), as pure functions of its state."""
from __future__ import annotations

from dataclasses import dataclass

from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.ledger import LearnerRecord


@dataclass(frozen=True)
class Rejection:
    reason: str                     # a schemas.training.RejectReason code
    detail: str


def admit(h: FragmentHeader, *, fingerprint: str, version: int, numel: int, record: LearnerRecord | None,
          config: SyncConfig) -> Rejection | None:
    """None if the push may join the fragment's round, else why not."""
    if h.fingerprint != fingerprint:
        return Rejection("fingerprint", f"layout fingerprint {h.fingerprint[:12]}... differs from the run's "
                         f"{fingerprint[:12]}...; start the learner with the run's model, tuning and num_fragments")
    if record is not None and h.generation < record.generation:
        return Rejection("replaced_generation",
                         f"generation {h.generation} of {h.learner!r} was replaced by generation {record.generation}")
    if h.numel != numel:
        return Rejection("bad_header", f"fragment {h.fragment} has {numel} values, the push declares {h.numel}")
    if record is not None and h.generation == record.generation and h.local_step <= record.last_step.get(h.fragment, -1):
        return Rejection("duplicate", f"push of fragment {h.fragment} at step {h.local_step} was already taken")
    if h.base_version > version:
        return Rejection("future_base", f"base version {h.base_version} is newer than the syncer's {version} "
                         "(the syncer restarted from an older snapshot)")
    if version - h.base_version > config.max_base_lag:
        return Rejection("stale_base", f"base version {h.base_version} is {version - h.base_version} versions old; "
                         f"max_base_lag is {config.max_base_lag}")
    return None


def other_layout(h: FragmentHeader, fingerprint: str) -> Rejection:
    return Rejection("fingerprint", f"layout fingerprint {h.fingerprint[:12]}... differs from the run's {fingerprint[:12]}...")


def init_mismatch(h: FragmentHeader) -> Rejection:
    return Rejection("init_mismatch", f"initial values of fragment {h.fragment} differ from the adopted version 0; "
                     "the learner will be overwritten by the keyframe (check seeds and dtypes)")


def not_owned(h: FragmentHeader) -> Rejection:
    return Rejection("not_owned", f"fragment {h.fragment} belongs to another syncer instance")


def before_version_0(h: FragmentHeader) -> Rejection:
    return Rejection("bad_header", f"fragment {h.fragment} has no version 0 yet; the learner sends its init first")


def non_finite(h: FragmentHeader) -> Rejection:
    return Rejection("non_finite", f"push of fragment {h.fragment} at step {h.local_step} holds NaN or infinity")


def evicted(h: FragmentHeader) -> Rejection:
    return Rejection("evicted", f"partial message of fragment {h.fragment} at step {h.local_step} was dropped to keep pending "
                     "bytes under their cap (SyncConfig.max_pending_bytes); its sender sends it again")
