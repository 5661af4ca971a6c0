"""The head's throughput model: a syncer round's time from measured per-core rates, and the head a fleet needs.

A round of one fragment of n values with M pushes costs, on one core (services/syncer/core.py's path):
    intake    every push's encoded bytes hashed once (each chunk; the whole payload's digest is made from the chunks'
              since 2026-12-05, schemas/fragments.py digest "chunks"), M B_up sha
    take_in   each push decoded with its squared norm (one row folded): n (a_up + b_up) per push; a q4 push on a CPU
              head is kept encoded (its bytes copied, its norm from pieces decoded in cache: b_up = 0) and decoded
              again inside the Gram pass and the outer step (their rates are that path's since 2026-12-06)
    merge     the Gram pass over b and the M pushes, each row read once: n g M (M + 1) / 2 (g per value and pair of
              rows; b_up while not measured), then the outer step over M pushes: n (c0 + c1 (M + 2))
              (a sparse codec's push keeps its products from take_in, which folds k + 2 rows for push k:
              n (a_up + b_up (k + 2)), and has no pass; services/syncer/sparse.py)
    broadcast the fused encode of theta - shadow that advances the shadow, n e_down, and its bytes hashed once
    snapshot  three rows copied for the background write: 3 n copy
and on `cores` kernel threads that total divided by 1 + (min(cores, MAX_USEFUL_CORES) - 1) EFFICIENCY. The rates
are measured by benchmarks/head_rates.py (docs/HEAD.md has the command, the numbers and the model's error against
a measured round). A syncer instance takes its fragments' rounds one after another, so an instance owning f
fragments is busy f T(cores) per interval of the fleet (the H inner steps every learner does between pushes of a
fragment); `size_head` finds the fewest cores, over instances (`--syncers` shards) and threads, that keep every
instance under `margin` of the interval, or says by how much no head can.

    throughput.round_seconds(16 << 20, learners=4, codec_up="q4", codec_down="q4", cores=2)
    throughput.size_head(8_030_000_000, fragments=8, learners=4, codec_up="q4", codec_down="q4", interval_s=60.0)
The planner (services/planner/plan.py) calls `size_head` with the fleet's interval from its throughput model and
gives the head VM the cores it answers (schemas/head_size.py); it lives in schemas/ beside the head's memory model so
the planner and the syncer's benchmarks read the same model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from yeto.schemas import codecs

MAX_USEFUL_CORES = 8        # beyond this one instance's memory bandwidth, not its cores, bounds a round (not measured here)
EFFICIENCY = 0.51           # each core past the first adds this much of one: 1 -> 2 threads gave 1.51x at 64M on a quiet
                            # box (round.py at 6558786, 2026-12-06 04:23-04:27; 1.58x at 256M); 1.27x at 044cb01, before the
                            # serial steps went on the threads (44372a6); 1.96x at 16M on 2026-12-05


def _ns(table: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    return {k: (a * 1e-9, b * 1e-9) for k, (a, b) in table.items()}


@dataclass(frozen=True)
class Rates:
    """Seconds per unit on one core. q4's take-in (a, b = 0: kept encoded), the Gram pass g, the outer step c0, c1 and q4's
    broadcast are the kept path's, derived from one quiet round (2026-12-06 03:13-03:20 UTC, load 0.8-1.1, 044cb01,
    `round.py --values 64M --threads 1`, the lead's run: ingest 265.1 ms, merge 384.6, broadcast encode 246.6; the merge
    split between the pass and the step by their CPU times alone, 188.9 and 176.7 ms, benchmarks/results/round/
    threads-2026-12-06/micro_64M.txt; c0 : c1 kept as measured on 2026-12-05); the model gives 953 ms for that round,
    966.1 measured (fitted to it: not an independent check). The other codecs' take-in and broadcast, SHA-256 and the
    copy are `benchmarks/head_rates.py --values 4M --reps 7 --check` of 2026-12-05 at commit 39d5a3f (2 cores of an AMD
    EPYC znver4 at load 9-11; model_error=0.948): benchmarks/results/round/fused-2026-12-05/head_rates.txt. A head_rates.py
    run of the kept path at load 10-14 (threads-2026-12-06/head_rates_4M.txt) came out 2-3x slower throughout."""

    ingest: dict[str, tuple[float, float]] = field(default_factory=lambda: _ns({
        "q4": (0.7055, 0.0), "topk2": (0.555, 0.292), "topk4": (0.0, 0.721), "topk8": (1.008, 0.36),
        "bf16": (0.468, 0.258), "f32": (0.019, 0.303)}))     # push codec: (a, b) of a + b (rows folded), per value
    sha256_per_byte: float = 0.547e-9
    step_per_value: float = 0.5036e-9                        # c0
    step_per_value_row: float = 0.3777e-9                    # c1
    broadcast: dict[str, float] = field(default_factory=lambda: {k: v * 1e-9 for k, v in {
        "q4": 3.675, "topk2": 8.092, "topk4": 9.079, "topk8": 15.267, "bf16": 12.527, "f32": 2.058}.items()})   # per value
    copy_per_value_row: float = 0.1875e-9
    gram_pass_per_value_pair: float | None = 0.2961e-9       # g; None: the push codec's b (a fold's rate per row)


def speedup(cores: int) -> float:
    """What `cores` kernel threads give over one on a round (memory-bound past MAX_USEFUL_CORES)."""
    return 1.0 + (min(max(cores, 1), MAX_USEFUL_CORES) - 1) * EFFICIENCY


def round_seconds(values: int, *, learners: int, codec_up: str, codec_down: str, cores: int = 1,
                  rates: Rates | None = None) -> float:
    """Modelled wall seconds of one round of one fragment of `values` with `learners` pushes, on `cores` threads."""
    r = rates or Rates()
    n, m = float(values), learners
    a, b = r.ingest[codecs.codec(codec_up).name]
    sparse = hasattr(codecs.codec(codec_up), "decode_entries")   # products taken as each push comes, no pass
    folded = m * (m + 3) / 2 if sparse else m                  # sum of k + 2 over k = 0..m-1, or each push's own square
    pairs = 0 if sparse else m * (m + 1) / 2                   # b with each push, the pushes with each other
    intake = m * codecs.codec(codec_up).encoded_size(values) * r.sha256_per_byte        # its chunks' checks
    take_in = n * (m * a + folded * b)
    gram = n * pairs * (b if r.gram_pass_per_value_pair is None else r.gram_pass_per_value_pair)
    merge = gram + n * (r.step_per_value + r.step_per_value_row * (m + 2))
    down = codecs.codec(codec_down)
    broadcast = n * r.broadcast[down.name] + down.encoded_size(values) * r.sha256_per_byte
    snapshot = 3 * n * r.copy_per_value_row
    return (intake + take_in + merge + broadcast + snapshot) / speedup(cores)


@dataclass(frozen=True)
class HeadSize:
    """The head a fleet needs: `instances` syncers of `cores` threads each (or why none fits)."""

    fits: bool
    instances: int
    cores: int                      # kernel threads per instance
    round_s: float                  # one fragment's round on one instance
    busy_s: float                   # an instance's rounds per interval: its fragments, one after another
    interval_s: float
    margin: float
    reason: str = ""

    @property
    def total_cores(self) -> int:
        return self.instances * self.cores


def size_head(total_values: int, *, fragments: int, learners: int, codec_up: str, codec_down: str, interval_s: float,
              margin: float = 0.5, max_cores: int = MAX_USEFUL_CORES, max_instances: int | None = None,
              rates: Rates | None = None) -> HeadSize:
    """The fewest cores (instances x threads) whose rounds fit in `margin` of the fleet's interval (the seconds
    learners take for H inner steps): each instance owns ceil(fragments / instances) fragments of
    total_values / fragments values. When nothing fits, the largest head with `fits` False and the reason, in numbers."""
    if fragments < 1 or learners < 1 or interval_s <= 0 or not 0 < margin <= 1:
        raise ValueError("size_head needs fragments >= 1, learners >= 1, interval_s > 0 and 0 < margin <= 1")
    per_fragment = -(-total_values // fragments)
    budget = margin * interval_s
    best: HeadSize | None = None
    for instances in range(1, min(fragments, max_instances or fragments) + 1):
        owned = math.ceil(fragments / instances)
        for cores in range(1, max_cores + 1):
            round_s = round_seconds(per_fragment, learners=learners, codec_up=codec_up, codec_down=codec_down,
                                    cores=cores, rates=rates)
            size = HeadSize(True, instances, cores, round_s, owned * round_s, interval_s, margin)
            if size.busy_s <= budget and (best is None or size.total_cores < best.total_cores):
                best = size
    if best is not None:
        return best
    instances = min(fragments, max_instances or fragments)
    round_s = round_seconds(per_fragment, learners=learners, codec_up=codec_up, codec_down=codec_down, cores=max_cores,
                            rates=rates)
    busy = math.ceil(fragments / instances) * round_s
    return HeadSize(False, instances, max_cores, round_s, busy, interval_s, margin,
                    reason=f"{instances} syncers of {max_cores} cores take {busy:.3g} s of rounds per interval, above "
                           f"{margin:.0%} of the fleet's {interval_s:.3g} s interval; learners would wait on the head")


def inner_steps_to_fit(size: HeadSize, inner_steps: int) -> int:
    """The fewest inner steps H' >= `inner_steps` (the H that gave `size`'s interval) at which the largest head's rounds
    fit in `size.margin` of the interval: the interval grows with H, a round does not. `inner_steps` where they fit."""
    if inner_steps < 1:
        raise ValueError("inner_steps_to_fit needs inner_steps >= 1")
    if size.fits:
        return inner_steps
    step_s = size.interval_s / inner_steps
    return max(inner_steps, math.ceil(size.busy_s / (size.margin * step_s) - 1e-9))


def lag_refusal(size: HeadSize, inner_steps: int, fix: str) -> str:
    """Why a fleet whose rounds no head keeps up with at a given H (`inner_steps`) is refused, with the H that fits;
    `fix`: the verb for the other way out ("plan" or "name" fewer or slower islands)."""
    needed = inner_steps_to_fit(size, inner_steps)
    return (f"--sync-every {inner_steps}: no head keeps up with this fleet's rounds ({size.reason}); sync every {needed} "
            f"inner steps or more (--sync-every {needed}), or {fix} fewer or slower islands")
