"""Hardware policy for learners (CUDA, Ascend NPU, CPU): the one place that branches on the device kind.

Everything a learner needs to know about its accelerator is a field of `Accel` or a function here:
the device, the compute dtype, the torch.distributed backend, the autocast context, free memory and
whether a model must be sharded (FSDP2) rather than replicated (DDP). Other modules never test
`device.type`; they ask this module.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
from dataclasses import dataclass

import torch

KINDS = ("cuda", "npu", "cpu")
# Optimizer states and gradients on top of the weights, as a multiple of the weight bytes (AdamW, f32 master).
_FULL_TUNING_OVERHEAD = 4.0
_LORA_OVERHEAD = 1.3        # frozen base plus a small adapter, its grads and AdamW moments
_HEADROOM = 0.8             # activations, allocator fragmentation, CUDA context


@dataclass(frozen=True, kw_only=True)
class Accel:
    """The accelerator one learner rank runs on and how to use it."""

    kind: str
    """"cuda", "npu" (Ascend) or "cpu"."""
    device: torch.device
    """The device this rank computes on (cuda:<local_rank> on a multi-GPU node)."""
    dist_backend: str
    """torch.distributed backend inside an island: nccl, hccl or gloo."""
    compute_dtype: torch.dtype
    """Dtype of matmuls: bf16 on accelerators, f32 on CPU (CPU bf16 is slow and inexact)."""

    @property
    def is_accelerator(self) -> bool:
        return self.kind != "cpu"


def _npu_available() -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    import torch_npu  # noqa: F401  (registers torch.npu)
    return torch.npu.is_available()


def detect(*, local_rank: int = 0, prefer: str | None = None) -> Accel:
    """The best accelerator here (or `prefer`, e.g. "cpu" to force CPU), this rank's device on it."""
    kind = prefer or os.environ.get("YETO_DEVICE") or (
        "cuda" if torch.cuda.is_available() else "npu" if _npu_available() else "cpu")
    if kind not in KINDS:
        raise ValueError(f"unknown device kind {kind!r}: use one of {', '.join(KINDS)}")
    if kind == "cuda":
        return Accel(kind=kind, device=torch.device("cuda", local_rank), dist_backend="nccl",
                     compute_dtype=torch.bfloat16)
    if kind == "npu":
        return Accel(kind=kind, device=torch.device("npu", local_rank), dist_backend="hccl",
                     compute_dtype=torch.bfloat16)
    return Accel(kind="cpu", device=torch.device("cpu"), dist_backend="gloo", compute_dtype=torch.float32)


def set_device(accel: Accel) -> None:
    """Bind this process to its device, so collectives and default allocations land there."""
    if accel.kind == "cuda":
        torch.cuda.set_device(accel.device)
    elif accel.kind == "npu":
        torch.npu.set_device(accel.device)


def configure_threads(accel: Accel, *, ranks_on_host: int) -> int:
    """Split the host's cores between the ranks that share it (CPU) or keep a few for the input pipeline."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cores // max(1, ranks_on_host)) if accel.kind == "cpu" else min(4, cores)
    if "OMP_NUM_THREADS" in os.environ:     # an explicit setting wins
        threads = int(os.environ["OMP_NUM_THREADS"])
    torch.set_num_threads(threads)
    return threads


def weight_dtype(accel: Accel, *, tuning: str) -> torch.dtype:
    """Dtype the model's weights are stored in: a frozen LoRA base in bf16 on accelerators; trained
    weights in f32 everywhere (bf16 master weights lose small AdamW updates)."""
    return accel.compute_dtype if tuning == "lora" else torch.float32


def autocast(accel: Accel) -> contextlib.AbstractContextManager:
    """Mixed precision for forward passes: bf16 autocast on accelerators, nothing on CPU."""
    if not accel.is_accelerator:
        return contextlib.nullcontext()
    return torch.autocast(device_type=accel.kind, dtype=accel.compute_dtype)


def free_memory_bytes(accel: Accel) -> int:
    """Bytes free on this rank's device now (host memory available for CPU)."""
    if accel.kind == "cuda":
        return torch.cuda.mem_get_info(accel.device)[0]
    if accel.kind == "npu":
        return torch.npu.mem_get_info(accel.device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def needs_sharding(accel: Accel, *, param_bytes: int, tuning: str, world_size: int) -> bool:
    """Whether the island must shard the model (FSDP2): only on accelerators with more than one rank,
    and only when one replica with its training state does not fit one device."""
    if not accel.is_accelerator or world_size < 2:
        return False
    overhead = _FULL_TUNING_OVERHEAD if tuning == "full" else _LORA_OVERHEAD
    return param_bytes * overhead > free_memory_bytes(accel) * _HEADROOM


def empty_cache(accel: Accel) -> None:
    """Return cached blocks to the device, e.g. after loading and moving the model."""
    if accel.kind == "cuda":
        torch.cuda.empty_cache()
    elif accel.kind == "npu":
        torch.npu.empty_cache()
