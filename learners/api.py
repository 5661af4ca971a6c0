"""The learners' backbone face: the pieces every backend shares, for the benchmarks that run islands in process.

The CLI needs none of it (tests/layering.py: BENCH_FACES, not FACES). The learner contract itself, the command line
of a learner, is yeto.schemas.learner_contract.LearnerArgs.
"""
from __future__ import annotations

from yeto.learners import accel  # the device policy: CUDA, Ascend or CPU, threads, autocast
from yeto.learners.diloco_sync import DilocoSync  # the one step-boundary module: push deltas, apply globals
from yeto.learners.layout import TensorSpec, plan_layout  # trainable tensors split into fragments, deterministically
from yeto.learners.sync_hook import DilocoHook  # DilocoSync at a training loop's step boundary
from yeto.learners.transport.protocol import LocalTransport  # an in-process transport: inboxes instead of the bus

__all__ = ["DilocoHook", "DilocoSync", "LocalTransport", "TensorSpec", "accel", "plan_layout"]
