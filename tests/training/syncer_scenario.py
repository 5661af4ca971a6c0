"""A small deterministic syncer scenario for the golden history (scripts/gen_golden.py --syncer records it).

Three learners push q4 deltas of two fragments (one `embed`, merged by avg; one `layers`, by RDA) for
eight rounds on a simulated clock, straight into SyncerCore: a slow learner inside the grace window, then
past it (its push lands stale in the next round, where its next push supersedes it), a duplicate, an init
with other bytes. The merge-timing clock is stopped, so grace windows depend on simulated times alone.
"""
from __future__ import annotations

import heapq
import itertools

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.fragments import FragmentHeader, sha256, split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import GlobalVersionPublished, LearnerRejected, RoundMerged
from yeto.services.syncer.core import SyncerCore
from yeto.services.syncer.outputs import perform

SEED, ROUNDS, FP = 18, 8, "9" * 64
SIZES, ROLES = {0: 5000, 1: 3000}, {0: "layers", 1: "embed"}
STEP_S = {"l0": 0.1, "l1": 0.12, "l2": 0.3}
CONFIG = SyncConfig(num_fragments=2, keyframe_every=4, staleness_discount=0.8, grace_max_s=0.5)


class Recorder:
    """outputs.Sink: wake-ups go on the simulated clock's queue, events are kept."""

    chunk_bytes = 4096

    def __init__(self) -> None:
        self.queue: list = []
        self.order = itertools.count()
        self.events: list = []

    def at(self, t: float, what) -> None:
        heapq.heappush(self.queue, (t, next(self.order), what))

    def event(self, event) -> None:
        self.events.append(event)

    def chunk(self, header, chunk) -> None:       # what learners would receive: the history records versions
        pass

    def snapshot(self, snap) -> None:
        pass

    snapshot_later = snapshot

    def wake(self, at: float) -> None:
        self.at(at, None)


def message(learner: str, p: int, kind: str, codec: str, values: np.ndarray, **fields) -> list:
    payload = codecs.codec(codec).encode(values)
    header = FragmentHeader(run_id="golden", learner=learner, fragment=p, kind=kind, role=ROLES[p], fingerprint=FP,
                            codec=codec, numel=values.size, sha256=sha256(payload), **fields)
    return split_chunks(header, payload, chunk_bytes=1500)


def run() -> tuple[list, dict[tuple[int, int], tuple[float, float]]]:
    """The scenario's events, and (fragment, version) -> (‖Θ‖, ΣΘ) right after each merge (float64 over f32 Θ)."""
    rng = np.random.default_rng(SEED)
    core, sink, thetas = SyncerCore(CONFIG, run_id="golden", clock=lambda: 0.0), Recorder(), {}
    init = {p: rng.standard_normal(n).astype(np.float32) for p, n in SIZES.items()}
    for p in SIZES:
        sink.at(0.0, message("l0", p, "init", "f32", init[p]))
    sink.at(0.01, message("l1", 0, "init", "f32", init[0]))                 # the same bytes: adopted silently
    sink.at(0.02, message("l2", 1, "init", "f32", init[1] + 1))             # other bytes: init_mismatch
    for r in range(ROUNDS):
        start = 1.0 + r
        _drain(core, sink, thetas, until=start)
        for p, m in itertools.product(SIZES, range(3)):
            learner, base = f"l{m}", core.fragments[p].version               # the newest global it holds
            d = (0.05 * rng.standard_normal(SIZES[p]) + 0.02 * (m + 1) + 0.01 * r).astype(np.float32)
            fields = dict(local_step=8 * (r + 1), c_steps=8, c_tokens=100 * (m + 1) + r, tokens_to=(100 * (m + 1) + r) * (r + 1),
                          base_version=base, step_time_s=STEP_S[learner])
            t = start + 0.01 * m + (0.4 + (0.3 if r % 3 == 2 else 0.0) if learner == "l2" else 0.0)   # l2 slow, then late
            sink.at(t, message(learner, p, "push", "q4", d, **fields))
            if learner == "l2" and r % 3 == 1:                                 # an earlier push its next one supersedes
                sink.at(start + 0.2, message(learner, p, "push", "q4", d / 2, **{**fields, "local_step": 8 * r + 4}))
            if (r, learner) == (5, "l0"):                                    # a redelivered push: duplicate
                sink.at(t + 0.001, message(learner, p, "push", "q4", d, **fields))
    _drain(core, sink, thetas, until=float("inf"))
    return sink.events, thetas


def _drain(core: SyncerCore, sink: Recorder, thetas: dict, until: float) -> None:
    while sink.queue and sink.queue[0][0] < until:
        t, _, chunks = heapq.heappop(sink.queue)
        outputs = core.tick(t) if chunks is None else [o for h, c in chunks for o in core.receive(h, c, t)]
        perform(outputs, sink)
        for e in outputs:
            if isinstance(e, RoundMerged):
                theta = core.fragments[e.fragment].theta.astype(np.float64)
                thetas[e.fragment, e.global_version] = (float(np.linalg.norm(theta)), float(theta.sum()))


def history() -> dict:
    """What the golden fixture holds: every round's report with Θ's norm and sum after it, every refusal,
    and every published version."""
    events, thetas = run()
    rounds = [{**{k: getattr(e, k) for k in ("fragment", "global_version", "responders", "weights", "staleness", "tokens",
                                             "grace_ms", "quorum_ms", "delta_norm", "merge")},
               "theta_norm": thetas[e.fragment, e.global_version][0], "theta_sum": thetas[e.fragment, e.global_version][1]}
              for e in events if isinstance(e, RoundMerged)]
    return {"seed": SEED, "rounds": rounds,
            "rejected": [[e.learner, e.fragment, e.reason] for e in events if isinstance(e, LearnerRejected)],
            "published": [[e.fragment, e.global_version, e.keyframe, e.num_bytes]
                          for e in events if isinstance(e, GlobalVersionPublished)]}
