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
from yeto.services.syncer.fragment import (
    FragmentState,  # one fragment's state: take_in, add, merge, publish
    norm_after_broadcast,  # Θ's norm begun after the broadcast, or by a push
)
from yeto.services.syncer.gram import (  # the Gram matrix whole, one row, fused with a decode, or one pass at the merge
    RowProducts,
    decode_with_norm,
    gram,
    gram_at_merge,
    gram_pass,
    gram_row,
    keep_encoded,
    kept,
    kept_norm,
)
from yeto.services.syncer.liveness import silence_s  # how long a learner may be silent before rounds go on without it
from yeto.services.syncer.merge import merge_round  # one fragment's merge plus outer step, in place
from yeto.services.syncer.outputs import Broadcast, SaveSnapshot, broadcast_chunks, perform  # a round's asks, done
from yeto.services.syncer.rows import FragmentRows  # one fragment's theta, momentum and push rows in one block
from yeto.services.syncer.snapshot import copy_after_chunks, copy_later  # a snapshot's row copies on the copier thread
from yeto.services.syncer.snapshot import write as write_snapshot  # a fragment's snapshot to disk, as the service does

__all__ = ["Broadcast", "FragmentRows", "FragmentState", "RowProducts", "SaveSnapshot", "SyncerCore", "backend",
           "broadcast_chunks", "copy_after_chunks", "copy_later", "decode_with_norm", "gram", "gram_at_merge",
           "gram_pass", "gram_row", "keep_encoded", "kept", "kept_norm", "merge_round", "norm_after_broadcast", "perform",
           "profiling", "silence_s", "sparse", "throughput", "warmup", "write_snapshot"]
