"""A Mixtral-style Hugging Face checkpoint as a Megatron-Core GPTModel with expert parallelism, and back.

The stable names are the checkpoint's own (`model.layers.L.block_sparse_moe.experts.E.w1.weight`, ...): the sync
layout, the fragment assignment and the artifact use them, so an island of any expert-parallel degree shares
fragments with any other. Each name maps to one Megatron tensor on the rank that holds it: dense tensors on every
rank, expert E on expert-parallel rank E // (experts / EP) as its local expert E % (experts / EP). Megatron fuses
q/k/v into `linear_qkv` (grouped per key/value head) and an expert's w1 (gate) and w3 (up) into `linear_fc1`; those
are split here, so one Megatron tensor may carry several stable names.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

SUPPORTED = ("mixtral",)


@dataclass(frozen=True)
class Shape:
    """The model's dimensions, from its Hugging Face config."""

    vocab: int
    hidden: int
    ffn: int
    layers: int
    heads: int
    kv_heads: int
    experts: int
    top_k: int
    max_positions: int
    rope_theta: float
    norm_eps: float
    tied: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def of(cls, config) -> Shape:
        if config.model_type not in SUPPORTED:
            raise ValueError(f"megatron backend: model_type {config.model_type!r} is not supported; it converts "
                             f"{', '.join(SUPPORTED)} checkpoints (docs/MEGATRON.md)")
        if getattr(config, "head_dim", None) not in (None, config.hidden_size // config.num_attention_heads):
            raise ValueError("megatron backend: a head_dim other than hidden_size / num_attention_heads is not supported")
        theta = getattr(config, "rope_theta", None) or (getattr(config, "rope_parameters", None) or {}).get(
            "rope_theta", 1e6)
        return cls(vocab=config.vocab_size, hidden=config.hidden_size, ffn=config.intermediate_size,
                   layers=config.num_hidden_layers, heads=config.num_attention_heads,
                   kv_heads=config.num_key_value_heads, experts=config.num_local_experts,
                   top_k=config.num_experts_per_tok, max_positions=config.max_position_embeddings,
                   rope_theta=float(theta), norm_eps=config.rms_norm_eps,
                   tied=bool(getattr(config, "tie_word_embeddings", False)))


def build_model(shape: Shape, *, expert_parallel: int, dispatcher: str = "allgather"):
    """The Megatron-Core GPTModel of `shape` on this rank (local layer spec, CPU initialisation, fp32, no dropout;
    the all-gather token dispatcher, or alltoall with CUDA); the model-parallel state must be initialised."""
    from yeto.learners.megatron.host import refuse_cuda_only
    if dispatcher != "allgather":
        refuse_cuda_only(f"moe_token_dispatcher={dispatcher}")
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    if shape.experts % expert_parallel:
        raise ValueError(f"megatron backend: {shape.experts} experts do not split over expert parallelism "
                         f"{expert_parallel}")
    config = TransformerConfig(
        num_layers=shape.layers, hidden_size=shape.hidden, num_attention_heads=shape.heads,
        num_query_groups=shape.kv_heads, ffn_hidden_size=shape.ffn, moe_ffn_hidden_size=shape.ffn,
        num_moe_experts=shape.experts, moe_router_topk=shape.top_k, moe_token_dispatcher_type=dispatcher,
        moe_grouped_gemm=False, moe_aux_loss_coeff=0.0, expert_model_parallel_size=expert_parallel,
        add_bias_linear=False, normalization="RMSNorm", layernorm_epsilon=shape.norm_eps, gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, attention_dropout=0.0, hidden_dropout=0.0,
        use_cpu_initialization=True, transformer_impl="local", params_dtype=torch.float32, bf16=False,
        bias_activation_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        bias_dropout_fusion=False, apply_rope_fusion=False, gradient_accumulation_fusion=False)
    spec = get_gpt_layer_local_spec(num_experts=shape.experts, moe_grouped_gemm=False, normalization="RMSNorm")
    return GPTModel(config=config, transformer_layer_spec=spec, vocab_size=shape.vocab,
                    max_sequence_length=shape.max_positions, position_embedding_type="rope",
                    rotary_base=int(shape.rope_theta), share_embeddings_and_output_weights=shape.tied)


@dataclass(frozen=True)
class Slot:
    """Where one stable name lives: a Megatron parameter on `owner` (-1: every rank) and how to cut it out."""

    megatron: str
    owner: int
    read: Callable[[torch.Tensor], torch.Tensor]
    """The stable tensor out of the Megatron one (a view where it can be)."""
    rows: slice | None = None
    """Where the stable tensor sits in the Megatron one when it is a block of rows (None: the whole tensor, or qkv)."""


def _whole(t: torch.Tensor) -> torch.Tensor:
    return t


def _rows(part: slice) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda t: t[part]


def qkv_index(shape: Shape, which: str) -> torch.Tensor:
    """The rows of Megatron's fused linear_qkv that hold q, k or v (grouped: per key/value head, its queries, k, v)."""
    d, per = shape.head_dim, shape.heads // shape.kv_heads
    group = (per + 2) * d
    start, width = {"q": (0, per * d), "k": (per * d, d), "v": ((per + 1) * d, d)}[which]
    return torch.cat([torch.arange(g * group + start, g * group + start + width) for g in range(shape.kv_heads)])


def slots(shape: Shape, *, expert_parallel: int) -> dict[str, Slot]:
    """Every stable name of the model and its slot, in the checkpoint's order of layers."""
    per_rank = shape.experts // expert_parallel
    out: dict[str, Slot] = {"model.embed_tokens.weight": Slot("embedding.word_embeddings.weight", -1, _whole)}
    for layer in range(shape.layers):
        hf, mc = f"model.layers.{layer}", f"decoder.layers.{layer}"
        qkv = f"{mc}.self_attention.linear_qkv.weight"
        for which in "qkv":
            index = qkv_index(shape, which)
            out[f"{hf}.self_attn.{which}_proj.weight"] = Slot(qkv, -1, lambda t, i=index: t[i])
        out[f"{hf}.self_attn.o_proj.weight"] = Slot(f"{mc}.self_attention.linear_proj.weight", -1, _whole)
        out[f"{hf}.input_layernorm.weight"] = Slot(f"{mc}.input_layernorm.weight", -1, _whole)
        out[f"{hf}.post_attention_layernorm.weight"] = Slot(f"{mc}.pre_mlp_layernorm.weight", -1, _whole)
        out[f"{hf}.block_sparse_moe.gate.weight"] = Slot(f"{mc}.mlp.router.weight", -1, _whole)
        for e in range(shape.experts):
            local = f"{mc}.mlp.experts.local_experts.{e % per_rank}"
            owner, ffn = e // per_rank, shape.ffn
            moe = f"{hf}.block_sparse_moe.experts.{e}"
            out[f"{moe}.w1.weight"] = Slot(f"{local}.linear_fc1.weight", owner, _rows(slice(0, ffn)), slice(0, ffn))
            out[f"{moe}.w3.weight"] = Slot(f"{local}.linear_fc1.weight", owner, _rows(slice(ffn, 2 * ffn)),
                                           slice(ffn, 2 * ffn))
            out[f"{moe}.w2.weight"] = Slot(f"{local}.linear_fc2.weight", owner, _whole)
    out["model.norm.weight"] = Slot("decoder.final_layernorm.weight", -1, _whole)
    if not shape.tied:
        out["lm_head.weight"] = Slot("output_layer.weight", -1, _whole)
    return out


@torch.no_grad()
def write_slot(shape: Shape, name: str, slot: Slot, param: torch.Tensor, value: torch.Tensor) -> None:
    """Put the stable tensor `value` into its place in the Megatron parameter `param`."""
    value = value.to(param.dtype)
    if ".self_attn." in name and name.rsplit(".", 2)[-2] in ("q_proj", "k_proj", "v_proj"):
        param[qkv_index(shape, name.rsplit(".", 2)[-2][0])] = value
    elif slot.rows is not None:
        param[slot.rows] = value
    else:
        param.copy_(value)
