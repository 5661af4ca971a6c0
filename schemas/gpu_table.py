"""Accelerator facts: memory and peak dense bf16 TFLOPs per GPU, read by the planner and the launcher's memory fit.

Pure data: the planner sizes fleets with it, the launcher checks a cloud island's memory with it
(services/launcher/memory_fit.py).

Peak numbers are vendor datasheet dense (no sparsity) bf16 tensor-core figures. Memory is in decimal GB
(an "80GB" H100 has 80 GiB = 85.9 GB); catalogs disagree on units (RunPod rows carry MiB/1024), so this
table, not the catalog's GpuInfo, is authoritative.
"""
from __future__ import annotations

from dataclasses import dataclass

GIB = 1.073741824  # decimal GB per GiB


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gb: float
    peak_bf16_tflops: float     # 0 means no bf16 tensor cores: rejected for bf16 training
    mfu: float = 0.40           # model FLOPs utilisation typical of FSDP/LoRA fine-tuning on this part


GPUS: dict[str, GpuSpec] = {g.name: g for g in (
    GpuSpec("B200", 180 * GIB, 2250.0),
    GpuSpec("H200", 141 * GIB, 989.0),
    GpuSpec("H100", 80 * GIB, 989.0),          # SXM; catalogs use H100 for SXM parts (p5, a3, Lambda sxm5)
    GpuSpec("H100-MEGA", 80 * GIB, 989.0),
    GpuSpec("GH200", 96 * GIB, 989.0),
    GpuSpec("A100-80GB", 80 * GIB, 312.0),
    GpuSpec("A100", 40 * GIB, 312.0),
    GpuSpec("L40S", 48 * GIB, 362.0, mfu=0.35),
    GpuSpec("L40", 48 * GIB, 181.0, mfu=0.35),
    GpuSpec("L4", 24 * GIB, 121.0, mfu=0.35),
    GpuSpec("A10G", 24 * GIB, 70.0, mfu=0.35),
    GpuSpec("A10", 24 * GIB, 125.0, mfu=0.35),
    GpuSpec("A6000", 48 * GIB, 154.8, mfu=0.35),
    GpuSpec("A5000", 24 * GIB, 111.1, mfu=0.35),
    GpuSpec("A4000", 16 * GIB, 76.7, mfu=0.35),
    GpuSpec("RTX4090", 24 * GIB, 165.2, mfu=0.35),
    GpuSpec("RTX3090", 24 * GIB, 71.0, mfu=0.35),
    GpuSpec("MI300X", 192 * GIB, 1307.0, mfu=0.30),
    GpuSpec("MI250X", 128 * GIB, 383.0, mfu=0.30),
    GpuSpec("V100", 16 * GIB, 0.0),
    GpuSpec("V100-32GB", 32 * GIB, 0.0),
    GpuSpec("T4", 16 * GIB, 0.0),
)}
