"""QLoRA's frozen base: NF4 through bitsandbytes (double quantization, compute in the accelerator's dtype).

bitsandbytes quantizes each linear layer of the decoder while transformers loads it, straight onto the
rank's device, so a 4-bit base never exists in bf16 on that device. The LM head and the embeddings stay in
the load dtype (transformers skips the output embedding; QLoRA does the same). LoRA adapters go on top in
f32 and are what the run trains and syncs: the artifact is an adapter for the bf16 base.
"""
from __future__ import annotations

import importlib.util
import sys

import torch

from yeto.learners.accel import Accel, refusal

# Where bitsandbytes' 4-bit kernels run: CUDA, and its CPU backend (slow, but real; what CPU tests use).
# Ascend NPUs have no bitsandbytes backend (accel.py's refusal says so and what to use instead).
NF4_KINDS = ("cuda", "cpu")
INSTALL_HINT = "pip install 'yeto[qlora]' (bitsandbytes)"


def nf4_problem(kind: str) -> str | None:
    """Why NF4 cannot run on a `kind` device here (None: it can)."""
    if why := refusal(kind, "nf4"):
        return why
    if kind not in NF4_KINDS:
        return f"bitsandbytes has no {kind} backend: NF4 runs on CUDA GPUs (or, slowly, the CPU); use --base-quantization none"
    if importlib.util.find_spec("bitsandbytes") is None:
        return f"bitsandbytes is not installed in this environment: {INSTALL_HINT}, or use --base-quantization none"
    return None


def keep_out_unless(nf4: bool) -> None:
    """Without NF4, keep bitsandbytes out of this process: peft imports it whenever it is installed (and it pulls in
    torch's inductor), ~3 s of CPU at every learner start for nothing (`python -c "import torch, transformers, peft"`
    9.6 s vs 6.6 s with it kept out, on the 2-core box). A None in sys.modules makes `import bitsandbytes` fail and
    find_spec answer "not installed", which every user of it here and in peft treats as "no QLoRA"."""
    if not nf4 and "bitsandbytes" not in sys.modules:
        sys.modules["bitsandbytes"] = None   # type: ignore[assignment]


def nf4_config(accel: Accel):
    """transformers' BitsAndBytesConfig for QLoRA on `accel`; ValueError says what to do where NF4 cannot run."""
    if problem := nf4_problem(accel.kind):
        raise ValueError(f"--base-quantization nf4: {problem}")
    from transformers import BitsAndBytesConfig
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=accel.compute_dtype)


def quantized_layers(model: torch.nn.Module) -> int:
    """How many weights are 4-bit (bitsandbytes' Params4bit; 0: nothing was quantized)."""
    return sum(1 for p in model.parameters() if type(p).__name__ == "Params4bit")


def device_map(accel: Accel) -> dict[str, str | int]:
    """Load every module onto this rank's device: bitsandbytes quantizes there as the weights stream in."""
    return {"": accel.device.index if accel.device.index is not None else accel.device.type}
