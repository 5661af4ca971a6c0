"""Who may push to a run, and how much: checks on a chunk's header against the tape, before anything is kept.

The launcher's IslandUp / IslandReplaced events (folded in runs.py) announce each learner generation;
the subject a chunk came on names its sender (NATS permissions pin a learner's credential to it). So a
header cannot claim another learner, an unannounced generation, more tokens than its steps allow, a payload
other than its fragment's size, or a norm far beyond the fragment's; each refusal says what is missing.
Its steps and tokens are clipped to what the recipe allows since its base version (`bounded`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.admission import Rejection

TOKEN_HEADROOM = 2          # c_tokens <= 2 x token slots per step x ranks x steps (padding is counted in slots)
STEP_SLACK = 2              # c_steps clipped to H x (lag + 2): a push not yet merged is carried again by the next one


@dataclass(frozen=True)
class Roster:
    """A run's announced learners: learner id -> newest generation announced, and its ranks (nodes x count)."""

    generations: Mapping[str, int] = field(default_factory=dict)
    ranks: Mapping[str, int] = field(default_factory=dict)
    tokens_per_step: int = 0        # token slots one rank takes per inner step (micro_batch x grad_accum x seq_len)
    gone: Mapping[str, int] = field(default_factory=dict)   # learner id -> newest generation reported gone (liveness.py)


def identity(h: FragmentHeader, *, run_id: str, sender: str | None, roster: Roster | None) -> Rejection | None:
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


def layout(h: FragmentHeader, *, fingerprint: str | None, numel: int | None) -> Rejection | None:
    """The header against the fragment's known layout (numel None: no version 0 yet)."""
    if fingerprint is not None and h.fingerprint != fingerprint:
        return Rejection("fingerprint", f"layout fingerprint {h.fingerprint[:12]}... differs from the run's "
                         f"{fingerprint[:12]}...; start the learner with the run's model, tuning and num_fragments")
    if h.kind == "push" and numel is None:
        return Rejection("bad_header", f"fragment {h.fragment} has no version 0 yet; the learner sends its init first")
    if numel is not None and h.numel != numel:
        return Rejection("bad_header", f"fragment {h.fragment} has {numel} values, the header declares {h.numel}")
    return None


def tokens(h: FragmentHeader, *, roster: Roster | None) -> Rejection | None:
    """Refuse c_tokens no rank could have trained in the push's own c_steps (an honest learner never sends it)."""
    if roster is None or h.kind != "push" or not roster.tokens_per_step:
        return None
    ranks, steps = roster.ranks.get(h.learner, 1), max(1, h.c_steps)
    cap = TOKEN_HEADROOM * roster.tokens_per_step * ranks * steps
    if h.c_tokens > cap:
        return Rejection("too_many_tokens", f"c_tokens {h.c_tokens} exceeds {cap}: {TOKEN_HEADROOM} x "
                         f"{roster.tokens_per_step} token slots x {ranks} ranks x {steps} steps")
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


def norm(h: FragmentHeader, *, sq_norm: float, theta_norm: float, config: SyncConfig) -> Rejection | None:
    """A push's norm within max(ratio x ||Θ||, rms x sqrt(numel)) (SyncConfig.max_push_norm_ratio, max_push_rms)."""
    bound = max(config.max_push_norm_ratio * theta_norm, config.max_push_rms * math.sqrt(h.numel))
    if math.sqrt(max(sq_norm, 0.0)) > bound:
        return Rejection("norm_too_large", f"push of fragment {h.fragment} has norm {math.sqrt(sq_norm):.4g}, above the "
                         f"bound {bound:.4g} (max_push_norm_ratio x the fragment's norm {theta_norm:.4g}, or max_push_rms)")
    return None
