"""Hardware policy for learners (CUDA, Ascend NPU, CPU): the one place that branches on the device kind.

Two halves. The policy is pure: `policy(kind, capabilities)` and the functions under it decide the device, the
torch.distributed backend, the compute dtype (bf16 by Ascend generation), where free memory is asked and what a
kind cannot run, from the `Capabilities` a probe found, so every NPU choice is tested without an NPU
(tests/accel/). The edge (`detect`, `set_device`, `free_memory_bytes`, `empty_cache`) probes and calls torch.cuda
or torch.npu; torch_npu is imported only there, only when an NPU is asked for or looked for. Other modules never
test `device.type`; they ask this module. docs/ASCEND.md: what runs on an NPU, what is refused, what was tested.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
from dataclasses import dataclass

import torch

KINDS = ("cuda", "npu", "cpu")
DIST_BACKENDS = {"cuda": "nccl", "npu": "hccl", "cpu": "gloo"}
# Optimizer states and gradients on top of the weights, as a multiple of the weight bytes (AdamW, f32 master).
_FULL_TUNING_OVERHEAD = 4.0
_LORA_OVERHEAD = 1.3        # frozen base plus a small adapter, its grads and AdamW moments
_HEADROOM = 0.8             # activations, allocator fragmentation, CUDA context
# Ascend generations by the name torch_npu reports (torch.npu.get_device_name), first prefix that matches:
# (prefix, generation, bf16 matmuls, trains). The 910 (2019; also Ascend910ProB, Ascend910PremiumA) computes fp16
# and int8 only; 910B (Ascend910B1..B4) and 910C (A3 boards: Ascend910_93xx) add bf16; 310 cards serve inference.
ASCEND = (("Ascend910_93", "910C", True, True), ("Ascend910B", "910B", True, True),
          ("Ascend910", "910", False, True), ("Ascend310", "310", False, False))
# What a kind cannot run and what to use instead, asked by name where a path is chosen (learners/torch/quant.py
# for NF4, the syncer's array backend for CuPy) and listed in docs/ASCEND.md.
UNSUPPORTED = {
    "npu": {
        "nf4": "bitsandbytes has no npu backend (Ascend), so QLoRA's NF4 base runs on CUDA GPUs (or, slowly, the CPU) "
               "only; use --base-quantization none (LoRA on a bf16 base) on NPU islands",
        "cupy": "CuPy's kernels are CUDA-only; on an Ascend host the syncer merges with NumPy "
                "(leave YETO_SYNCER_BACKEND unset or set it to numpy)",
        "flash_attn": "the flash-attn package builds CUDA kernels only; models load with torch's SDPA attention "
                      "(transformers' default), which torch_npu serves",
        "fused_adamw": "torch.optim.AdamW(fused=True) is not assumed on an NPU; learners step with foreach=True "
                       "(learners/torch/optim.py), which every device runs",
        "megatron": "the megatron backend runs on the CPU (gloo) and needs CUDA for its fused paths; Ascend's "
                    "Megatron port (MindSpeed) is not integrated: use --island-backend torch on NPU islands",
    },
    "cpu": {
        "cupy": "CuPy's kernels are CUDA-only; without a CUDA device the syncer merges with NumPy",
        "flash_attn": "the flash-attn package builds CUDA kernels only; the CPU runs torch's SDPA attention",
    },
    "cuda": {},
}


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What a probe of this host found for one kind (`probe`): the policy's only input besides the kind."""

    device_name: str = ""
    """torch.<kind>.get_device_name(): "NVIDIA H100 80GB HBM3", "Ascend910B2"; "" on the CPU or where none answered."""
    torch_npu: bool = False
    """torch_npu (Ascend's PyTorch adapter, which registers torch.npu) is importable here."""


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The policy's answer for one rank: what `Accel` is built from (the device as text: "npu:0" is a device only
    once torch_npu has registered the name)."""

    kind: str
    device: str
    dist_backend: str
    compute_dtype: torch.dtype


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
    """Dtype of matmuls: bf16 where the device has it, f32 on CPU (CPU bf16 is slow and inexact) and on an Ascend
    910 (fp16 only, and fp16 training needs loss scaling, which the learners do not do)."""

    @property
    def is_accelerator(self) -> bool:
        return self.kind != "cpu"


def ascend_generation(device_name: str) -> tuple[str, bool, bool] | None:
    """(generation, bf16, trains) of an Ascend device name; None for a name the table does not know."""
    for prefix, generation, bf16, trains in ASCEND:
        if device_name.startswith(prefix):
            return generation, bf16, trains
    return None


def compute_dtype(kind: str, caps: Capabilities) -> torch.dtype:
    """bf16 on CUDA and on an Ascend generation known to have it; f32 on the CPU, an Ascend 910 and an NPU whose
    name the table does not know (correct everywhere, slower: docs/ASCEND.md)."""
    if kind == "cuda":
        return torch.bfloat16
    if kind == "npu" and (gen := ascend_generation(caps.device_name)) is not None and gen[1]:
        return torch.bfloat16
    return torch.float32


def training_problem(kind: str, caps: Capabilities) -> str | None:
    """Why a rank of `kind` cannot train here (None: it can)."""
    if kind not in KINDS:
        return f"unknown device kind {kind!r}: use one of {', '.join(KINDS)}"
    if kind == "npu" and not caps.torch_npu:
        return ("--device npu needs torch_npu (Ascend's PyTorch adapter, built for this torch "
                f"{torch.__version__.split('+')[0]}) and the CANN toolkit, which are not installed here "
                "(docs/ASCEND.md); or use --device cpu")
    if kind == "npu" and (gen := ascend_generation(caps.device_name)) is not None and not gen[2]:
        return f"{caps.device_name} is an Ascend {gen[0]} inference card; training needs an Ascend 910-class NPU"
    return None


def refusal(kind: str, feature: str) -> str | None:
    """Why `feature` (nf4, cupy, flash_attn, fused_adamw, megatron) cannot run on `kind` (None: it can)."""
    return UNSUPPORTED.get(kind, {}).get(feature)


def memory_module(kind: str) -> str | None:
    """The torch submodule that answers this kind's free memory and caches (torch.cuda, torch.npu); None: host RAM."""
    return kind if kind in ("cuda", "npu") else None


def policy(kind: str, caps: Capabilities, *, local_rank: int = 0) -> Choice:
    """The device, collective backend and dtype of rank `local_rank`; ValueError says why it cannot train here."""
    if why := training_problem(kind, caps):
        raise ValueError(why)
    device = "cpu" if kind == "cpu" else f"{kind}:{local_rank}"
    return Choice(kind=kind, device=device, dist_backend=DIST_BACKENDS[kind], compute_dtype=compute_dtype(kind, caps))


def must_shard(kind: str, *, param_bytes: int, free_bytes: int, tuning: str, world_size: int) -> bool:
    """Whether the island must shard the model (FSDP2): only on accelerators with more than one rank, and only
    when one replica with its training state does not fit the device's free memory."""
    if kind == "cpu" or world_size < 2:
        return False
    overhead = _FULL_TUNING_OVERHEAD if tuning == "full" else _LORA_OVERHEAD
    return param_bytes * overhead > free_bytes * _HEADROOM


def _npu_available() -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    import torch_npu  # noqa: F401  (registers torch.npu)
    return torch.npu.is_available()


def probe(kind: str, *, local_rank: int = 0) -> Capabilities:
    """The capabilities of this host for `kind` (imports torch_npu only when `kind` is npu and it is installed)."""
    has_npu = kind == "npu" and importlib.util.find_spec("torch_npu") is not None
    name = ""
    if kind == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(local_rank)
    elif has_npu and _npu_available():
        name = torch.npu.get_device_name(local_rank)
    return Capabilities(device_name=name, torch_npu=has_npu)


def detect(*, local_rank: int = 0, prefer: str | None = None) -> Accel:
    """The best accelerator here (or `prefer`, e.g. "cpu" to force CPU), this rank's device on it."""
    kind = prefer or os.environ.get("YETO_DEVICE") or (
        "cuda" if torch.cuda.is_available() else "npu" if _npu_available() else "cpu")
    c = policy(kind, probe(kind, local_rank=local_rank), local_rank=local_rank)
    return Accel(kind=c.kind, device=torch.device(c.device), dist_backend=c.dist_backend, compute_dtype=c.compute_dtype)


def set_device(accel: Accel) -> None:
    """Bind this process to its device, so collectives and default allocations land there."""
    if module := memory_module(accel.kind):
        getattr(torch, module).set_device(accel.device)


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
    """Mixed precision for forward passes: bf16 autocast where the policy chose bf16, nothing where it chose f32."""
    if not accel.is_accelerator or accel.compute_dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=accel.kind, dtype=accel.compute_dtype)


def free_memory_bytes(accel: Accel) -> int:
    """Bytes free on this rank's device now (host memory available for CPU)."""
    if module := memory_module(accel.kind):
        return getattr(torch, module).mem_get_info(accel.device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def needs_sharding(accel: Accel, *, param_bytes: int, tuning: str, world_size: int) -> bool:
    """`must_shard` with this rank's free device memory (asked only where it can matter)."""
    if not accel.is_accelerator or world_size < 2:
        return False
    return must_shard(accel.kind, param_bytes=param_bytes, free_bytes=free_memory_bytes(accel), tuning=tuning,
                      world_size=world_size)


def empty_cache(accel: Accel) -> None:
    """Return cached blocks to the device, e.g. after loading and moving the model."""
    if module := memory_module(accel.kind):
        getattr(torch, module).empty_cache()
