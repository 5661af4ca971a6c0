"""Stage 1: a chunk's header against the owner, the subject, the tape and the layout, before anything is kept.

The launcher's IslandUp / IslandReplaced events (folded in runs.py into the Roster) announce each learner
generation; the subject a chunk came on names its sender (NATS permissions pin a learner's credential to it). So a
header cannot claim another learner, an unannounced generation or a payload other than its fragment's size.
"""
from __future__ import annotations

from yeto.schemas.fragments import FragmentError, FragmentHeader
from yeto.services.syncer.admission.rejection import Rejection
from yeto.services.syncer.roster import Roster


def chunk(h: FragmentHeader, *, run_id: str, sender: str | None, owned: frozenset[int] | None, roster: Roster | None,
          fingerprint: str | None, numel: int | None) -> Rejection | None:
    """`sender`: the subject's learner (None: not checked); `owned`: None owns every fragment; `numel`: None while
    the fragment has no version 0."""
    if h.kind not in ("push", "init"):
        return Rejection("bad_header", f"a learner sends init and push messages, not {h.kind}")
    if owned is not None and h.fragment not in owned:
        return Rejection("not_owned", f"fragment {h.fragment} belongs to another syncer instance")
    return _identity(h, run_id=run_id, sender=sender, roster=roster) or _layout(h, fingerprint=fingerprint, numel=numel)


def _identity(h: FragmentHeader, *, run_id: str, sender: str | None, roster: Roster | None) -> Rejection | None:
    """The header's run, learner and generation against the subject and the launcher's announcements."""
    if h.run_id != run_id:
        return Rejection("bad_header", f"the header names run {h.run_id!r}, the subject run {run_id!r}")
    if sender is not None and sender != h.learner:
        return Rejection("wrong_subject", f"a chunk on the subject of learner {sender!r} claims learner {h.learner!r}; "
                         "a learner publishes only on yeto.frag.<run>.<fragment>.<its own id>")
    if roster is None:
        return None
    newest = roster.generations.get(h.learner)
    if newest is None:
        return Rejection("not_announced", f"learner {h.learner!r} has no IslandUp in run {run_id!r}; "
                         "the launcher announces every island it starts")
    if h.generation > newest:
        return Rejection("not_announced", f"generation {h.generation} of {h.learner!r} was never announced "
                         f"(newest IslandUp / IslandReplaced: generation {newest})")
    return None


def _layout(h: FragmentHeader, *, fingerprint: str | None, numel: int | None) -> Rejection | None:
    """The header against the fragment's known layout (numel None: no version 0 yet)."""
    if fingerprint is not None and h.fingerprint != fingerprint:
        return Rejection("fingerprint", f"layout fingerprint {h.fingerprint[:12]}... differs from the run's "
                         f"{fingerprint[:12]}...; start the learner with the run's model, tuning and num_fragments")
    if h.kind == "push" and numel is None:
        return Rejection("bad_header", f"fragment {h.fragment} has no version 0 yet; the learner sends its init first")
    if numel is not None and h.numel != numel:
        return Rejection("bad_header", f"fragment {h.fragment} has {numel} values, the header declares {h.numel}")
    return None


def assembly(e: FragmentError) -> Rejection:
    """The ChunkAssembler's refusal of a chunk (schemas/fragments.py: sizes, counts, checksums), as its event says it."""
    return Rejection(e.reason, e.detail)


def evicted(h: FragmentHeader) -> Rejection:
    return Rejection("evicted", f"partial message of fragment {h.fragment} at step {h.local_step} was dropped to keep pending "
                     "bytes under their cap (SyncConfig.max_pending_bytes); its sender sends it again")
