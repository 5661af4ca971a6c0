"""Stages 2 to 4: a reassembled message against its fragment and the learner's ledger, its bound, its decoded norm.

A push may not claim more tokens than its steps allow, nor a norm far beyond its fragment's; an admitted push's steps
and tokens are clipped to what the recipe allows since its base version (`bounded`).
"""
from __future__ import annotations

import math

from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.admission.rejection import Rejection
from yeto.services.syncer.ledger import LearnerRecord
from yeto.services.syncer.roster import Roster

TOKEN_HEADROOM = 2          # c_tokens <= 2 x token slots per step x ranks x steps (padding is counted in slots)
STEP_SLACK = 2              # c_steps clipped to H x (lag + 2): two intervals of slack beyond the lag


def push(h: FragmentHeader, *, fingerprint: str | None, version: int, numel: int, record: LearnerRecord | None,
         roster: Roster | None, config: SyncConfig) -> Rejection | None:
    """None if the push may join the fragment's round, else why not."""
    if h.fingerprint != fingerprint:
        return Rejection("fingerprint", f"layout fingerprint {h.fingerprint[:12]}... differs from the run's "
                         f"{(fingerprint or '')[:12]}...; start the learner with the run's model, tuning and num_fragments")
    if record is not None and h.generation < record.generation:
        return Rejection("replaced_generation",
                         f"generation {h.generation} of {h.learner!r} was replaced by generation {record.generation}")
    if h.numel != numel:
        return Rejection("bad_header", f"fragment {h.fragment} has {numel} values, the push declares {h.numel}")
    if record is not None and h.generation == record.generation and record.already(h):
        return Rejection("duplicate", f"push of fragment {h.fragment} at step {h.local_step} (base version "
                         f"{h.base_version}) is not after the last one admitted")
    if h.base_version > version:
        return Rejection("future_base", f"base version {h.base_version} is newer than the syncer's {version} "
                         "(the syncer restarted from an older snapshot)")
    if version - h.base_version > config.max_base_lag:
        return Rejection("stale_base", f"base version {h.base_version} is {version - h.base_version} versions old; "
                         f"max_base_lag is {config.max_base_lag}")
    return _tokens(h, roster=roster)


def _tokens(h: FragmentHeader, *, roster: Roster | None) -> Rejection | None:
    """Refuse c_tokens no rank could have trained in the push's own c_steps (an honest learner never sends it)."""
    if roster is None or h.kind != "push" or not roster.tokens_per_step:
        return None
    ranks, steps = roster.ranks.get(h.learner, 1), max(1, h.c_steps)
    cap = TOKEN_HEADROOM * roster.tokens_per_step * ranks * steps
    if h.c_tokens > cap:
        return Rejection("too_many_tokens", f"c_tokens {h.c_tokens} exceeds {cap}: {TOKEN_HEADROOM} x "
                         f"{roster.tokens_per_step} token slots x {ranks} ranks x {steps} steps")
    return None


def init(h: FragmentHeader, *, fingerprint: str | None) -> Rejection | None:
    """An init of another layout than the run's (adopted from the first learner when the syncer was not told)."""
    if h.fingerprint != fingerprint:
        return Rejection("fingerprint",
                         f"layout fingerprint {h.fingerprint[:12]}... differs from the run's {(fingerprint or '')[:12]}...")
    return None


def same_init(h: FragmentHeader, *, init_sha: str | None) -> Rejection | None:
    """An init whose bytes differ from the adopted version 0's (None: version 0 came from a snapshot; nothing to compare)."""
    if init_sha not in (None, h.sha256):
        return Rejection("init_mismatch", f"initial values of fragment {h.fragment} differ from the adopted version 0; "
                         "the learner will be overwritten by the keyframe (check seeds and dtypes)")
    return None


def bounded(h: FragmentHeader, *, version: int, roster: Roster | None, config: SyncConfig) -> FragmentHeader:
    """The push with c_steps clipped to H x (lag + 2) and c_tokens to what those steps allow: its merge weight and
    goodput credit are bounded, while a learner that trained long without a global (the syncer was away) still merges."""
    if roster is None or h.kind != "push":
        return h
    steps = min(h.c_steps, config.inner_steps * (max(0, version - h.base_version) + STEP_SLACK))
    tokens = h.c_tokens
    if roster.tokens_per_step:
        tokens = min(tokens, TOKEN_HEADROOM * roster.tokens_per_step * roster.ranks.get(h.learner, 1) * max(1, steps))
    return h if (steps, tokens) == (h.c_steps, h.c_tokens) else h.model_copy(update={"c_steps": steps, "c_tokens": tokens})


def decoded(h: FragmentHeader, *, sq_norm: float, theta_norm: float, config: SyncConfig) -> Rejection | None:
    """The decoded push finite, its norm within max(ratio x ||Θ||, rms x sqrt(numel)) (SyncConfig.max_push_norm_ratio,
    max_push_rms); `sq_norm` is its squared norm (not finite if the push is not)."""
    if not math.isfinite(sq_norm):
        return Rejection("non_finite", f"push of fragment {h.fragment} at step {h.local_step} holds NaN or infinity")
    bound = max(config.max_push_norm_ratio * theta_norm, config.max_push_rms * math.sqrt(h.numel))
    if math.sqrt(max(sq_norm, 0.0)) > bound:
        return Rejection("norm_too_large", f"push of fragment {h.fragment} has norm {math.sqrt(sq_norm):.4g}, above the "
                         f"bound {bound:.4g} (max_push_norm_ratio x the fragment's norm {theta_norm:.4g}, or max_push_rms)")
    return None
