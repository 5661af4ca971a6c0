"""The memory model of an expert-parallel island (`--island-backend megatron`, docs/MEGATRON.md): each of its GPUs
holds every dense tensor and 1/EP of the experts, so a MoE whose experts do not fit one GPU fits an island of EP GPUs.

Pure: the caller gives the model's Mixtral-style config (a dict of config.json) and the island's EP degree; the
per-GPU state uses memory.py's bytes per parameter, its activations and overhead are memory.py's for the dense
shape of the active parameters (the experts a token runs through). The fleet search sizes islands with `island_fit`
(candidates.py): every GPU of an island is one EP rank, as the megatron learner runs them, or, with tensor parallelism
TP (`--megatron-tp`), an island of N GPUs is N / TP EP groups of TP GPUs, each GPU holding 1/TP of its group's dense
tensors and experts (the learner splits the experts over the TP ranks too). Activations are not divided by TP here
(sequence parallelism would split most of them): the need stays an upper bound.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from yeto.schemas.memory_model import BYTES_PER_PARAM, USABLE_FRACTION, Need, Workload, fits, per_gpu_need

TP_KEY = "megatron_tp"
"""Where `yeto shape --megatron-tp N` puts the run's tensor parallelism in the request's MoE config (PlanRequest.moe,
the model's config.json otherwise); without it the plan is TP 1."""


@dataclass(frozen=True)
class MoeSplit:
    """A MoE's parameters: what every rank holds (dense) and what is split over the experts, and the run's TP."""

    dense: int
    per_expert: int
    experts: int
    top_k: int
    tensor_parallel: int = 1

    @property
    def total(self) -> int:
        return self.dense + self.per_expert * self.experts

    @property
    def active(self) -> int:
        """Parameters one token runs through: the dense ones and top_k experts."""
        return self.dense + self.per_expert * self.top_k


def moe_split(config: dict[str, Any]) -> MoeSplit:
    """The split of a Mixtral-style config.json (num_local_experts, num_experts_per_tok), with its TP_KEY if any;
    ValueError naming a missing key, or what does not split over the TP."""
    try:
        h, ffn, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
        heads, kv, experts = config["num_attention_heads"], config["num_key_value_heads"], config["num_local_experts"]
        vocab, top_k = config["vocab_size"], config["num_experts_per_tok"]
    except KeyError as e:
        raise ValueError(f"not a Mixtral-style MoE config: no {e.args[0]}") from None
    tp = config.get(TP_KEY, 1)
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise ValueError(f"--megatron-tp {tp!r}: must be a whole number of at least 1")
    for what, n in (("attention heads", heads), ("key/value heads", kv), ("intermediate_size", ffn)):
        if n % tp:
            raise ValueError(f"--megatron-tp {tp}: the model's {what} ({n}) do not split over it")
    head_dim = config.get("head_dim") or h // heads
    attention = h * head_dim * (2 * heads + 2 * kv)
    per_layer = attention + 2 * h + h * experts        # q, k, v, o; two norms; the router
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return MoeSplit(dense=layers * per_layer + embeddings + h, per_expert=layers * 3 * h * ffn, experts=experts,
                    top_k=top_k, tensor_parallel=tp)


def experts_per_rank(split: MoeSplit, ep: int) -> int:
    if ep < 1 or split.experts % ep:
        raise ValueError(f"{split.experts} experts do not split over expert parallelism {ep}")
    return split.experts // ep


def expert_parallel_need(split: MoeSplit, ep: int, w: Workload) -> Need:
    """Per-GPU need on an island of `ep` expert-parallel groups of split.tensor_parallel GPUs: 1/TP of the dense state
    and of this group's experts' state, plus activations and overhead of a dense model of the active parameters
    (w.weights_gb is ignored for the state)."""
    held = (split.dense + split.per_expert * experts_per_rank(split, ep)) / split.tensor_parallel
    state_gb = held * BYTES_PER_PARAM[(w.tuning, w.base_quantization)] / 1e9
    active = per_gpu_need(Workload(weights_gb=split.active * 2 / 1e9, tuning=w.tuning, seq_len=w.seq_len,
                                   micro_batch=w.micro_batch, vocab=w.vocab, shard="ddp",
                                   activation_checkpointing=w.activation_checkpointing), 1)
    return Need(state_gb, active.activations_gb, active.overhead_gb, active.checkpointed)


def island_split(split: MoeSplit, num_gpus: int) -> tuple[int, int] | None:
    """(EP, TP) of an island of `num_gpus`: num_gpus / TP expert-parallel groups; None where they do not split."""
    tp = split.tensor_parallel
    if num_gpus % tp or split.experts % (num_gpus // tp):
        return None
    return num_gpus // tp, tp


def describe_split(split: MoeSplit, num_gpus: int) -> str:
    """How an island of `num_gpus` runs the MoE, in words (`yeto shape`)."""
    found = island_split(split, num_gpus)
    if found is None:
        return (f"{num_gpus} GPU(s) do not split into expert-parallel groups of {split.tensor_parallel} over "
                f"{split.experts} experts")
    ep, tp = found
    per = f"{split.experts // ep} expert(s) a group"
    return f"EP {ep} x TP {tp}: {per}, each group's tensors split over {tp} GPU(s)" if tp > 1 else \
        f"EP {ep} x TP 1: {per} (one GPU each)"


def island_fit(w: Workload, split: MoeSplit | None, num_gpus: int, gpu_memory_gb: float) -> tuple[bool, Need | None]:
    """Whether an island of `num_gpus` holds the workload, and its per-GPU need: the dense model (FSDP over the island)
    when `split` is None, else EP x TP ranks (need None: the experts or the TP do not split over them)."""
    if split is None:
        return fits(w, num_gpus, gpu_memory_gb)
    found = island_split(split, num_gpus)
    if found is None:
        return False, None
    need = expert_parallel_need(split, found[0], w)
    return need.total_gb <= gpu_memory_gb * USABLE_FRACTION, need
