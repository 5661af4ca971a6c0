"""LoRA for the MLX learner, shaped, scaled and named as peft does it for the torch learner.

peft's LoRA on a Linear(in, out): lora_A (r, in) drawn kaiming-uniform (a=sqrt(5), so U(-1/sqrt(in), 1/sqrt(in))),
lora_B (out, r) zeros, y = base(x) + (alpha / r) * (x A^T) B^T. Its trainable tensors are named
`base_model.model.<module path>.lora_{A,B}.default.weight`: the MLX island declares the same names, shapes, order
and dtype, so its layout fingerprint equals a torch island's on the same model and recipe and both join one run.
A's draw here (NumPy, seeded) is not torch's: an MLX island that does not send version 0 fetches it (the values
differ, keyframe_demand.py), and one that sends it is fetched from by torch islands.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

# Attention and MLP projections of the Llama family: learners/torch/tuning.py's default for these architectures.
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PEFT_PREFIX = "base_model.model."


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, *, r: int, alpha: float, rng: np.random.Generator) -> None:
        super().__init__()
        out_dims, in_dims = base.weight.shape
        self.base, self.scale = base, alpha / r
        bound = 1.0 / np.sqrt(in_dims)
        self.lora_A = mx.array(rng.uniform(-bound, bound, (r, in_dims)).astype(np.float32))
        self.lora_B = mx.zeros((out_dims, r), dtype=mx.float32)

    def __call__(self, x: mx.array) -> mx.array:
        y = self.base(x)
        return y + (self.scale * ((x.astype(mx.float32) @ self.lora_A.T) @ self.lora_B.T)).astype(y.dtype)


def apply_lora(model: nn.Module, *, r: int, alpha: float, seed: int, targets: tuple[str, ...] = ()) -> None:
    """Wrap every target projection in LoRA (in module-path order, from one seeded generator); only A and B train."""
    targets = targets or TARGETS
    rng = np.random.default_rng(seed)
    model.freeze()
    for path, module in sorted(model.named_modules()):
        if isinstance(module, nn.Linear) and path.rsplit(".", 1)[-1] in targets:
            parent_path, name = path.rsplit(".", 1)
            parent = _module_at(model, parent_path)
            parent[name] = LoRALinear(module, r=r, alpha=alpha, rng=rng)
    for _, module in model.named_modules():
        if isinstance(module, LoRALinear):
            module.unfreeze(keys=["lora_A", "lora_B"], recurse=False)
    mx.eval(model.parameters())


def _module_at(model: nn.Module, path: str) -> nn.Module:
    node = model
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def peft_name(mlx_name: str) -> str:
    """`model.layers.0.self_attn.q_proj.lora_A` -> `base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight`."""
    module, tensor = mlx_name.rsplit(".", 1)
    return f"{PEFT_PREFIX}{module}.{tensor}.default.weight"


def trainable(model: nn.Module) -> dict[str, str]:
    """peft name -> MLX path of every trainable tensor."""
    return {peft_name(path): path for path, _ in tree_flatten(model.trainable_parameters())}
