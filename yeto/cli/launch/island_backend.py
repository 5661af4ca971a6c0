"""`yeto launch --island-backend`: which learner backend (schemas/learner_contract.py) trains a causal-LM run's
islands. torch is the default; megatron (Megatron-Core, a Mixtral-style MoE with its experts split over each
island's ranks: docs/MEGATRON.md) trains every tensor (--tuning full) or LoRA adapters on the attention projections.

`--oversubscribe-cpus` is here too, for the small machine an island of several CPU ranks (an expert-parallel one, most
of all) does not otherwise fit: up to two local CPU learner processes a CPU (schemas/capacity.py states the rule).
It goes into the launch recipe, so the launcher's own check of the fleet allows what `yeto launch` allowed."""
from __future__ import annotations

from typing import Any

from yeto.schemas.gpuspec import parse_gpu
from yeto.schemas.learner_contract import BACKENDS

CHOICES = tuple(name for name, info in BACKENDS.items() if info.model_kind == "lm")


def add_arguments(p, *, launch: bool = True) -> None:
    """--island-backend and --megatron-tp (`yeto launch` and `yeto shape`); --oversubscribe-cpus with `launch`."""
    p.add_argument("--island-backend", choices=CHOICES, default=None,
                   help="the learner backend of a causal-LM run (default torch); megatron: a Mixtral-style MoE on "
                        "Megatron-Core, experts split over each island's ranks; --tuning full, or lora on the "
                        "attention projections (docs/MEGATRON.md)")
    p.add_argument("--megatron-tp", type=int, default=None, metavar="N",
                   help="with --island-backend megatron: tensor parallelism inside each island (default 1); an island "
                        "of R ranks runs R/N expert-parallel groups of N tensor-parallel ranks (docs/MEGATRON.md)")
    if not launch:
        return
    p.add_argument("--oversubscribe-cpus", action="store_true", default=False,
                   help="let local CPU islands run up to two learner processes per CPU of this machine (without it, "
                        "one per CPU): each step is slower, the training the same; for tiny models on small machines")


def apply(args, recipe: dict[str, Any]) -> dict[str, Any]:
    """The launch recipe with the chosen backend (and --oversubscribe-cpus); ValueError for a combination the backend
    would not train."""
    if getattr(args, "oversubscribe_cpus", False):
        recipe = {**recipe, "oversubscribe_cpus": True}
    name = getattr(args, "island_backend", None)
    if name is None:
        if getattr(args, "megatron_tp", None) is not None:
            _tensor_parallel(args, args.megatron_tp)
        return recipe
    if getattr(args, "model_kind", "lm") != "lm":
        raise ValueError(f"--island-backend {name} trains causal LMs: not with --model-kind {args.model_kind}")
    if name == "megatron" and getattr(args, "base_quantization", "none") != "none":
        raise ValueError(f"--island-backend megatron: --base-quantization {args.base_quantization} is not built (no "
                         "quantized Megatron-Core base); drop it")
    if name == "megatron" and args.tuning == "lora":
        _megatron_lora(args)
    if name == "megatron" and args.tuning == "lora" and (getattr(args, "megatron_tp", None) or 1) > 1:
        raise ValueError("--island-backend megatron: LoRA with --megatron-tp is not built (the adapters are not split "
                         "over TP ranks): drop --megatron-tp, or give --tuning full")
    if name == "megatron" and getattr(args, "external_learners", 0):
        raise ValueError("--island-backend megatron: --external-learners join with the torch or mlx backend, "
                         "not megatron")
    if name != "torch" and getattr(args, "gpu", None) and any(i.gpu == "npu" for i in parse_gpu(args.gpu)):
        raise ValueError(f"--island-backend {name} does not run on Ascend NPUs (--gpu {args.gpu}): use --island-backend "
                         "torch on NPU islands (docs/ASCEND.md)")
    if (tp := getattr(args, "megatron_tp", None)) is not None:
        recipe = {**recipe, "train": {**recipe.get("train", {}), "tensor_parallel": _tensor_parallel(args, tp)}}
    return {**recipe, "island_backend": name}


def _tensor_parallel(args, tp: int) -> int:
    """--megatron-tp, checked against the backend and the --gpu islands' ranks."""
    if args.island_backend != "megatron":
        raise ValueError(f"--megatron-tp splits a Megatron-Core island's tensors: add --island-backend megatron "
                         f"(the {args.island_backend or 'torch'} backend runs no tensor parallelism), or drop it")
    if tp < 1:
        raise ValueError(f"--megatron-tp {tp}: must be at least 1")
    for island in parse_gpu(args.gpu) if getattr(args, "gpu", None) else []:
        if island.num_gpus % tp:
            raise ValueError(f"--megatron-tp {tp} does not divide the {island.num_gpus} rank(s) of "
                             f"--gpu island {island.cloud}:{island.count}x{island.gpu}: each island runs ranks / TP "
                             "expert-parallel groups of TP ranks")
    return tp


def _megatron_lora(args) -> None:
    """What LoRA on the megatron backend does not do, refused before anything starts (the learner refuses it too, and
    --target-modules beyond the attention projections: learners/megatron/lora.py, which the CLI may not import)."""
    if getattr(args, "lora_dropout", None):
        raise ValueError(f"--island-backend megatron: --lora-dropout {args.lora_dropout} is not built: drop it (0)")
