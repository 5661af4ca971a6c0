"""The syncer's public face: its core, the kernels the merge, memory and round benchmarks measure, the head's model.

The CLI never needs the syncer, so this face is not one of the CLI's (tests/layering.py: FACES); benchmarks/ reach the
syncer through it alone (BENCH_FACES).
"""
from __future__ import annotations

from yeto.schemas import head_throughput as throughput  # a round's time from measured rates (docs/HEAD.md)
from yeto.services.syncer import (
    backend,  # the array backend the merge runs on: NumPy, or CuPy on a GPU
    profiling,  # timers on a round's steps (benchmarks/round_profile.py)
    sparse,  # sparse pushes merged as (indices, values), or densely (benchmarks/round_sparse.py)
    warmup,  # a run's kernels made before its first round (benchmarks/syncer_warmup.py)
)
from yeto.services.syncer.core import SyncerCore  # the pure round logic: pushes in, outputs out
from yeto.services.syncer.fragment import FragmentState  # one fragment's state: take_in, add, merge, publish
from yeto.services.syncer.gram import RowProducts, gram, gram_row  # the Gram matrix whole, one row, fused with a decode
from yeto.services.syncer.liveness import silence_s  # how long a learner may be silent before rounds go on without it
from yeto.services.syncer.merge import merge_round  # one fragment's merge plus outer step, in place
from yeto.services.syncer.outputs import Broadcast, SaveSnapshot, perform  # what a round asks for, and doing it
from yeto.services.syncer.rows import FragmentRows  # one fragment's theta, momentum and push rows in one block
from yeto.services.syncer.snapshot import write as write_snapshot  # a fragment's snapshot to disk, as the service does

__all__ = ["Broadcast", "FragmentRows", "FragmentState", "RowProducts", "SaveSnapshot", "SyncerCore", "backend", "gram",
           "gram_row", "merge_round", "perform", "profiling", "silence_s", "sparse", "throughput",
           "warmup", "write_snapshot"]
