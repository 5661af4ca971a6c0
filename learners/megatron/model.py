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
from dataclasses import dataclass, replace

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

    @property
    def parameters(self) -> int:
        """Every parameter of the model (the checkpoint's count)."""
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        layer = attention + 2 * self.hidden + self.hidden * self.experts + self.experts * 3 * self.hidden * self.ffn
        return self.layers * layer + self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    def padded_vocab(self, tensor_parallel: int) -> int:
        """The vocabulary Megatron builds: a multiple of the TP degree (the rows past `vocab` are never read)."""
        return -(-self.vocab // tensor_parallel) * tensor_parallel

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


class SequenceParallelRMSNorm(torch.nn.RMSNorm):
    """torch's RMSNorm as Megatron's local spec builds it, without its refusal of sequence parallelism (Megatron-Core
    0.16.1's WrappedTorchNorm asserts it off, and MoE with TP needs it on): RMSNorm is per token, so a shard of the
    sequence is normalised as the whole would be; its weight's gradient is summed over the TP ranks
    (island.reduce_gradients), as the `sequence_parallel` mark Megatron's own norms carry says."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **_: object) -> None:
        super().__init__(hidden_size, eps=eps)
        self.weight.sequence_parallel = config.sequence_parallel   # type: ignore[attr-defined]


def check_split(shape: Shape, *, expert_parallel: int, tensor_parallel: int) -> None:
    """ValueError naming what does not split over the island's EP x TP ranks."""
    if shape.experts % expert_parallel:
        raise ValueError(f"megatron backend: {shape.experts} experts do not split over expert parallelism "
                         f"{expert_parallel}")
    for what, n in (("attention heads", shape.heads), ("key/value heads", shape.kv_heads),
                    ("intermediate_size", shape.ffn)):
        if n % tensor_parallel:
            raise ValueError(f"megatron backend: {what} {n} do not split over tensor parallelism {tensor_parallel}")


def build_model(shape: Shape, *, expert_parallel: int, tensor_parallel: int = 1, dispatcher: str = "allgather"):
    """The Megatron-Core GPTModel of `shape` on this rank (local layer spec, CPU initialisation, fp32, no dropout;
    the all-gather token dispatcher, or alltoall with CUDA); the model-parallel state must be initialised. With
    tensor parallelism the attention, the experts (expert TP = TP), the embedding and the output layer are split over
    the TP ranks, with sequence parallelism (Megatron's MoE trains with TP only so), and the logits are gathered."""
    from yeto.learners.megatron.host import refuse_cuda_only
    if dispatcher != "allgather":
        refuse_cuda_only(f"moe_token_dispatcher={dispatcher}")
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
    from megatron.core.transformer.transformer_config import TransformerConfig
    check_split(shape, expert_parallel=expert_parallel, tensor_parallel=tensor_parallel)
    config = TransformerConfig(
        num_layers=shape.layers, hidden_size=shape.hidden, num_attention_heads=shape.heads,
        num_query_groups=shape.kv_heads, ffn_hidden_size=shape.ffn, moe_ffn_hidden_size=shape.ffn,
        num_moe_experts=shape.experts, moe_router_topk=shape.top_k, moe_token_dispatcher_type=dispatcher,
        moe_grouped_gemm=False, moe_aux_loss_coeff=0.0, expert_model_parallel_size=expert_parallel,
        tensor_model_parallel_size=tensor_parallel, sequence_parallel=tensor_parallel > 1,
        add_bias_linear=False, normalization="RMSNorm", layernorm_epsilon=shape.norm_eps, gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, attention_dropout=0.0, hidden_dropout=0.0,
        use_cpu_initialization=True, transformer_impl="local", params_dtype=torch.float32, bf16=False,
        bias_activation_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        bias_dropout_fusion=False, apply_rope_fusion=False, gradient_accumulation_fusion=False)
    layer = get_gpt_layer_local_spec(num_experts=shape.experts, moe_grouped_gemm=False, normalization="RMSNorm")
    layer = replace(layer, submodules=replace(layer.submodules, input_layernorm=SequenceParallelRMSNorm,
                                              pre_mlp_layernorm=SequenceParallelRMSNorm))
    block = TransformerBlockSubmodules(layer_specs=[layer] * shape.layers, layer_norm=SequenceParallelRMSNorm)
    return GPTModel(config=config, transformer_layer_spec=block, vocab_size=shape.padded_vocab(tensor_parallel),
                    max_sequence_length=shape.max_positions, position_embedding_type="rope",
                    rotary_base=int(shape.rope_theta), share_embeddings_and_output_weights=shape.tied,
                    parallel_output=False)


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
    vocab = _rows(slice(0, shape.vocab)), slice(0, shape.vocab)   # the rows past it pad the vocabulary for TP
    out: dict[str, Slot] = {"model.embed_tokens.weight": Slot("embedding.word_embeddings.weight", -1, *vocab)}
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
        out["lm_head.weight"] = Slot("output_layer.weight", -1, *vocab)
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


def partition_dim(param: torch.Tensor, tensor_parallel: int) -> int | None:
    """The dimension Megatron splits `param` over the TP ranks along; None where every TP rank holds it whole."""
    if tensor_parallel == 1 or not getattr(param, "tensor_model_parallel", False):
        return None
    return int(param.partition_dim)   # type: ignore[attr-defined]


def _gated(megatron: str) -> bool:
    """An expert's fused linear_fc1: each TP rank holds its rows of w1 (gate) and then its rows of w3 (up)."""
    return megatron.endswith("linear_fc1.weight")


def unshard(megatron: str, shards: list[torch.Tensor], dim: int) -> torch.Tensor:
    """The whole Megatron tensor, in the layout of TP 1 that `slots` reads, out of its TP shards in TP-rank order."""
    if _gated(megatron):
        halves = [s.chunk(2) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves])
    return torch.cat(shards, dim=dim)


def shard_of(megatron: str, whole: torch.Tensor, dim: int, tensor_parallel: int, tp_rank: int) -> torch.Tensor:
    """TP rank `tp_rank`'s shard of the whole tensor (unshard's inverse)."""
    if _gated(megatron):
        gate, up = whole.chunk(2)
        return torch.cat([gate.chunk(tensor_parallel)[tp_rank], up.chunk(tensor_parallel)[tp_rank]])
    return whole.chunk(tensor_parallel, dim=dim)[tp_rank]


def whole_shape(param: torch.Tensor, dim: int | None, tensor_parallel: int) -> tuple[int, ...]:
    """The shape of the whole tensor a rank's shard belongs to."""
    out = list(param.shape)
    if dim is not None:
        out[dim] *= tensor_parallel
    return tuple(out)
