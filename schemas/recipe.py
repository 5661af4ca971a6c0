"""The synchronization recipe shared by learners and syncer: every ALGORITHM.md default, one frozen dataclass."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from yeto.schemas import codecs

MERGES = ("rda", "avg")
RESTARTS = ("off", "opposed", "damped")
GLOBAL_APPLIES = ("blend", "rebase")
PUSH_SCHEDULES = ("steps", "global")
WEIGHTINGS = ("tokens", "tokens_sq_per_step")
MAX_FRAGMENTS = 4096


@dataclass(frozen=True, kw_only=True)
class SyncConfig:
    """How learners push and how the syncer merges; part of a run's recipe, identical on every process."""

    num_fragments: int = 8
    """P: trainable tensors are split into this many fragments, synchronized independently."""
    inner_steps: int = 24
    """H: inner steps between two pushes of the same fragment; fragment p is pushed at offset p*H/P."""
    inner_steps_start: int = 0
    """H0: with a ramp, the first interval; H grows linearly from H0 to inner_steps over inner_steps_ramp steps
    (more frequent pushes while the model moves fast). 0 = H from the first step."""
    inner_steps_ramp: int = 0
    """Inner steps over which the interval grows from inner_steps_start to inner_steps (with inner_steps_start only)."""
    quorum: int | None = None
    """K: pushes needed before a fragment may merge; None = majority of live learners (1 is allowed)."""
    grace_gamma: float = 0.8
    """gamma in the adaptive grace window (Decoupled DiLoCo Eq. 3)."""
    grace_tau_steps: float = 2.0
    """tau: the grace budget in inner steps of the slowest live learner."""
    grace_max_s: float = 1.0
    """Upper bound of the grace window in seconds (WAN runs want more)."""
    step_time_ema: float = 0.8
    """Weight of the previous value in a learner's EMA of its step time (sent with each push; sizes the grace window)."""
    learner_timeout_s: float = 60.0
    """Upper bound on a learner's silence before it stops counting as live (the syncer's bound is a few of its push gaps)."""
    outer_lr: float = 0.7
    """eta of the Nesterov outer step."""
    momentum: float = 0.9
    """mu of the Nesterov outer step (0 disables momentum)."""
    momentum_restart: str = "opposed"
    """opposed (default; `yeto launch --tuning full` sets off unless told): a round whose merged pseudo-gradient points
    against the momentum (<delta, b> < 0) drops b first (adaptive restart, O'Donoghue & Candes 2015): the outer step's
    look-ahead stops carrying a direction the learners just walked back from; off: plain Nesterov. Measured
    (docs/BENCHMARK_RESULTS.md): LoRA on a pretrained model at a tuned lr, -31.9% held-out CE against off on the demo
    (recall) task and -0.43% on docstring Q&A (5 seeds each); from scratch, +0.44% (tuned lr) to ~+2% (lr below the
    tuned one), and on wan.py 20 steps to the target (+0.68% and +1.01% over two tuning seeds, 2026-12-05). damped:
    such a round scales b by 1 + cos(delta, b) instead of dropping it."""
    momentum_restart_cos: float = 0.0
    """With momentum_restart = opposed, the restart drops b only for a round with cos(delta, b) below this, in [-1, 0]
    (0: every opposed round). With merge_alpha > 0 most rounds point back against b by construction (a learner
    keeps part of its own values), so a threshold below 0 restarts only the rounds that reverse the momentum
    outright (docs/BENCHMARK_RESULTS.md)."""
    merge: str = "rda"
    """rda (radial-directional average: the pushes' mean direction at their mean length) or avg (the token-weighted
    mean); embedding fragments always use avg. `yeto launch --tuning full` sets avg unless told: under the outer
    momentum RDA's longer step cost full tuning ~1% held-out CE (docs/BENCHMARK_RESULTS.md, claims 4-5)."""
    weighting: str = "tokens"
    """Push weight: tokens (c_tokens) or tokens_sq_per_step (c_tokens**2 / c_steps)."""
    alpha: float = 0.5
    """Merge alpha of the learner's blend theta <- alpha*theta + (1-alpha)*global (0 = overwrite)."""
    global_apply: str = "blend"
    """How a learner takes a new global: blend, theta <- alpha*theta + (1-alpha)*global (what it trained since its
    push is blended away with the rest), or rebase, theta <- theta + (1-alpha)*(global - r), r = its values at
    its push (the anchor when no push is pending): the steps trained while the push was in flight are kept, as
    their token counts already are (learners/diloco_sync.py)."""
    push_schedule: str = "steps"
    """steps (default): fragment p is pushed at fixed local steps (offset p*H/P, then every H), whatever the others do;
    global: after a global answers a push of p, p is pushed next H - min(lag, max(1, H // 12)) steps after that global
    landed (lag: steps from the push to the landing), so learners that run out of phase push each fragment close together in
    time again: the global lands on every learner at about the same moment (docs/SYNC_MATH.md, push schedule)."""
    first_merge_wait_s: float = 60.0
    """A learner with two pushes of a fragment out, neither answered, while that fragment's global is still version 0
    (no round of it merged yet: a syncer compiling its kernels on a fresh install took 22-42 s, and learners that
    trained on alone were merged in one backlog that set the run back, benchmarks/results/wan/rebase-2026-12-06/)
    waits at its step boundary for the first merged version, up to this many seconds, once per learner; 0: never.
    A learner with no version 0 (no syncer heard) never waits."""
    max_base_lag: int = 4
    """A push whose base version is more than this many versions old is rejected as stale."""
    staleness_discount: float = 1.0
    """s: a push's weight is multiplied by s**lag, lag = current version - base version (1 = no discount)."""
    keyframe_every: int = 16
    """K: a full f32 keyframe of the broadcast shadow every K versions (for joining learners)."""
    codec_up: str = "q4"
    """Codec of learner pushes, a protocol id in schemas/codecs (f32, bf16, q4, topk2, topk4, topk8); q4 and the topk
    codecs are sent with error feedback."""
    codec_down: str = "q4"
    """Codec of broadcast deltas between keyframes, a protocol id in schemas/codecs (f32, bf16, q4, topk2, topk4, topk8)."""
    feedback_decay: float = 1.0
    """beta: a learner's error-feedback residual is scaled by beta before each push adds to it (1 = nothing lost;
    below 1, SparseLoCo's leaky accumulator: docs/SYNC_MATH.md, sparse pushes)."""
    snapshot_every: int = 1
    """Write a fragment's snapshot every N of its merges (1 = before every publish: no version is ever lost)."""
    max_push_norm_ratio: float = 1.0
    """The syncer refuses a push d with ||d|| > max(ratio * ||Theta_p||, max_push_rms * sqrt(numel)) (norm_too_large)."""
    max_push_rms: float = 0.1
    """The floor of that bound as a root-mean-square per value (a fragment whose values start at zero, e.g. LoRA B)."""
    max_pending_bytes: int = 0
    """Cap on bytes of partial fragment messages the syncer holds; 0 = sized from the run's fragments."""

    def __post_init__(self) -> None:
        for f in fields(self):   # a recipe comes over the bus: types first, so a string or NaN never reaches a comparison
            value, kind = getattr(self, f.name), str(f.type).split(" |")[0]
            if value is None and f.type == "int | None":
                continue
            wanted = {"int": (int,), "float": (int, float), "str": (str,)}[kind]
            if isinstance(value, bool) or not isinstance(value, wanted) or (kind != "str" and not math.isfinite(float(value))):
                raise ValueError(f"invalid sync recipe: {f.name} must be a finite {kind}, got {value!r:.40}")
        checks = [
            (1 <= self.num_fragments <= MAX_FRAGMENTS, f"num_fragments must be in [1, {MAX_FRAGMENTS}]"),
            (self.inner_steps >= 1, "inner_steps (H) must be >= 1"),
            (0 <= self.inner_steps_start <= self.inner_steps,
             f"inner_steps_start (H0) must be in [0, inner_steps = {self.inner_steps}] (0 = no ramp)"),
            ((self.inner_steps_start > 0) == (self.inner_steps_ramp > 0),
             "inner_steps_start and inner_steps_ramp go together: both above 0 (a ramp) or both 0"),
            (self.quorum is None or self.quorum >= 1, "quorum must be >= 1 or None (majority)"),
            (self.grace_gamma >= 0 and self.grace_tau_steps >= 0 and self.grace_max_s >= 0, "grace parameters must be >= 0"),
            (0 <= self.step_time_ema < 1, "step_time_ema must be in [0, 1)"),
            (self.learner_timeout_s > 0, "learner_timeout_s must be > 0"),
            (self.outer_lr > 0, "outer_lr must be > 0"),
            (0 <= self.momentum < 1, "momentum must be in [0, 1)"),
            (self.momentum_restart in RESTARTS, f"momentum_restart must be one of {', '.join(RESTARTS)}"),
            (-1 <= self.momentum_restart_cos <= 0, "momentum_restart_cos must be in [-1, 0] (a cosine at or below 0)"),
            (self.momentum_restart == "opposed" or self.momentum_restart_cos == 0,
             "momentum_restart_cos applies only with momentum_restart opposed (it would be ignored with off or damped)"),
            (self.push_schedule in PUSH_SCHEDULES, f"push_schedule must be one of {', '.join(PUSH_SCHEDULES)}"),
            (self.global_apply in GLOBAL_APPLIES, f"global_apply must be one of {', '.join(GLOBAL_APPLIES)}"),
            (self.merge in MERGES, f"merge must be one of {', '.join(MERGES)}"),
            (self.weighting in WEIGHTINGS, f"weighting must be one of {', '.join(WEIGHTINGS)}"),
            (0 <= self.alpha < 1, "alpha must be in [0, 1)"),
            (self.max_base_lag >= 0, "max_base_lag must be >= 0"),
            (self.first_merge_wait_s >= 0, "first_merge_wait_s must be >= 0 (0: never wait)"),
            (0 < self.staleness_discount <= 1, "staleness_discount must be in (0, 1]"),
            (self.keyframe_every >= 1, "keyframe_every must be >= 1"),
            (self.codec_up in codecs.CODECS and self.codec_down in codecs.CODECS,
             f"codec_up and codec_down must be one of {', '.join(codecs.CODECS)}"),
            (0 < self.feedback_decay <= 1, "feedback_decay must be in (0, 1]"),
            (self.snapshot_every >= 1, "snapshot_every must be >= 1"),
            (self.max_push_norm_ratio > 0 and self.max_push_rms > 0, "max_push_norm_ratio and max_push_rms must be > 0"),
            (self.max_pending_bytes >= 0, "max_pending_bytes must be >= 0 (0 = sized from the fragments)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"invalid sync recipe: {message}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SyncConfig:
        """Tolerant reader: unknown keys (from a newer recipe) are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
