"""What Megatron-Core 0.16.1 needs on a host without CUDA, and the refusals of what only CUDA runs.

Megatron-Core builds and trains a GPT/MoE model on the CPU over gloo with the local (non-TransformerEngine) layer
spec, but four places assume CUDA; `prepare_cpu` covers each, named here (docs/MEGATRON.md measured it):
- `torch.cuda.current_device()` places RoPE frequencies, router and expert buffers: it answers "cpu";
- the model-parallel RNG tracker forks CUDA generators: the no-op ("inference") tracker stands in, so dropout is
  refused above 0 (nothing may draw inside the forks);
- `moe_utils.te_general_gemm` is unbound without TransformerEngine (a NameError in the router, on CUDA too:
  `prepare_without_te`): it is None;
- the default causal mask is made on "cuda": the backend always passes its own mask.
"""
from __future__ import annotations

import torch

CUDA_ONLY = {
    "transformer_impl=transformer_engine": "TransformerEngine layers need CUDA (and the transformer-engine package)",
    "moe_token_dispatcher=alltoall": "the all-to-all token dispatcher opens CUDA streams (NCCL all-to-all)",
    "moe_token_dispatcher=flex": "the flex (DeepEP) dispatcher needs CUDA",
    "moe_grouped_gemm": "grouped GEMM experts need CUDA kernels (nv-grouped-gemm or TransformerEngine)",
    "fused kernels": "fused softmax, RoPE and bias-activation kernels need CUDA",
}


def refuse_cuda_only(feature: str) -> None:
    """A CUDA-only Megatron-Core feature asked for on a host without CUDA: ValueError naming it."""
    if not torch.cuda.is_available() and feature in CUDA_ONLY:
        raise ValueError(f"megatron backend: {feature} is refused on this host: {CUDA_ONLY[feature]}; "
                         "scripts/gpu_check.sh runs it where a GPU is lent (docs/MEGATRON.md)")


def prepare_without_te() -> None:
    """The router's NameError without TransformerEngine, on any device: its GEMM is then torch's."""
    from megatron.core.transformer.moe import moe_utils
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def prepare_cpu() -> None:
    """Make Megatron-Core 0.16.1 run on the CPU (the module docstring lists each change); a no-op with CUDA."""
    prepare_without_te()
    if torch.cuda.is_available():
        return
    from megatron.core.tensor_parallel import random as mrandom
    torch.cuda.current_device = lambda: "cpu"   # type: ignore[assignment]
    mrandom.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
