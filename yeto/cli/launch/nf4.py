"""`yeto launch --base-quantization nf4`: refuse, before anything starts or is rented, islands that cannot run QLoRA."""
from __future__ import annotations

import importlib.util

from yeto.schemas.gpuspec import IslandSpec


def check_nf4(islands: list[IslandSpec]) -> None:
    """Local islands need bitsandbytes here (they run in this environment) and a device it runs on (not an Ascend
    NPU); cloud islands need a GPU whose image gets it (the `gpu` extra, NVIDIA only). ValueError says what to do
    instead."""
    from yeto.services.planner.api import NO_NF4

    for i in islands:
        entry = f"--gpu entry {i.cloud}:{i.count}x{i.gpu.lower()}"
        if i.gpu == "npu":      # learners/accel.py refuses the same on the island itself
            raise ValueError(f"{entry}: --base-quantization nf4 loads the base through bitsandbytes, which has no "
                             f"Ascend NPU backend; use --base-quantization none (LoRA on a bf16 base) on NPU islands, "
                             f"or QLoRA on NVIDIA GPUs")
        if i.cloud == "local" and importlib.util.find_spec("bitsandbytes") is None:
            raise ValueError(f"{entry}: --base-quantization nf4 loads the base through bitsandbytes, which is not "
                             f"installed here: pip install 'yeto[qlora]' (or bitsandbytes), or use --base-quantization none")
        if i.gpu in NO_NF4:
            raise ValueError(f"{entry}: --base-quantization nf4 needs bitsandbytes, which {i.gpu} islands do not install "
                             f"(ROCm); pick an NVIDIA GPU for QLoRA, or use --base-quantization none on {i.gpu}")
