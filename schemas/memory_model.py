"""The memory model: what one GPU of an island must hold to fine-tune a model (formula in docs/MEMORY_MODEL.md).

All sizes in decimal GB. The frozen or trained model state is sharded evenly over the island's GPUs (FSDP);
activations, logits and the runtime overhead are per GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

BYTES_PER_PARAM = {
    ("lora", "none"): 2.0,      # frozen bf16 base
    ("lora", "nf4"): 0.5625,    # QLoRA NF4 + double-quantised constants (~4.13 bits) + bf16 norms/embeddings
    ("full", "none"): 16.0,     # x8 of bf16: bf16 weights + bf16 grads + fp32 master + two fp32 Adam moments
}
LORA_STATE_BYTES = 16.0         # adapter weights, grads, fp32 master and Adam moments, per adapter parameter
OVERHEAD_GB = 1.5               # CUDA context, NCCL buffers, allocator fragmentation, per GPU
USABLE_FRACTION = 0.95          # headroom the allocator cannot hand out
DEFAULT_VOCAB = 128_000
CHECKPOINTING = ("auto", "on", "off")
CHECKPOINT_SHARE = 0.9          # auto: checkpoint when a step's full activations need more of what the state leaves
WORKING_SET = 34                # bytes per token and hidden unit of one layer's activations (flash attention)
HIDDEN_PER_LAYER = 128          # h / L of Llama-style dense models (7B: 4096/32, 8B: 4096/32, 70B: 8192/80)


@dataclass(frozen=True, kw_only=True)
class Workload:
    weights_gb: float
    """bf16 footprint of all parameters (2 bytes per parameter)."""
    tuning: str = "lora"
    """lora or full."""
    base_quantization: str = "none"
    """none, or nf4 (QLoRA; only with lora)."""
    seq_len: int = 4096
    """tokens per sequence."""
    micro_batch: int = 1
    """sequences per GPU per forward pass."""
    lora_r: int = 16
    """adapter rank on every linear layer (the recipe's `lora_r`, `--lora-r`)."""
    vocab: int = DEFAULT_VOCAB
    """vocabulary size (the fp32 logits are materialised per micro-batch)."""
    activation_checkpointing: str = "auto"
    """on, off, or auto: on where a step's activations without it would not fit (the learner's same rule)."""
    shard: str = "auto"
    """auto or fsdp: the state is sharded over the island's GPUs (FSDP2); ddp: every GPU holds all of it."""

    def __post_init__(self) -> None:
        if (self.tuning, self.base_quantization) not in BYTES_PER_PARAM:
            raise ValueError(f"--tuning {self.tuning} with --base-quantization {self.base_quantization} is not supported; "
                             f"use lora with none or nf4, or full with none")
        if self.weights_gb <= 0 or self.seq_len < 1 or self.micro_batch < 1:
            raise ValueError("--weights-gb, --seq-len and --micro-batch must be positive")
        if self.activation_checkpointing not in CHECKPOINTING:
            raise ValueError(f"--activation-checkpointing must be one of {', '.join(CHECKPOINTING)}")


def shape_of(params: float) -> tuple[float, float]:
    """(hidden size, layers) of a dense transformer with `params` parameters: params = 12 L h^2, h = 128 L."""
    hidden = (params * HIDDEN_PER_LAYER / 12) ** (1 / 3)
    return hidden, max(1.0, hidden / HIDDEN_PER_LAYER)


@dataclass(frozen=True)
class Need:
    """Per-GPU memory need of a workload on an island of `num_gpus`, split by cause."""

    state_gb: float
    activations_gb: float
    overhead_gb: float
    checkpointed: bool = True
    """whether the activations counted are those of a checkpointed step."""

    @property
    def total_gb(self) -> float:
        return self.state_gb + self.activations_gb + self.overhead_gb


def per_gpu_need(w: Workload, num_gpus: int, *, checkpointed: bool | None = None) -> Need:
    """The need with activation checkpointing as `checkpointed` says (None: on unless the workload turns it off)."""
    checkpointed = w.activation_checkpointing != "off" if checkpointed is None else checkpointed
    params = w.weights_gb * 1e9 / 2
    hidden, layers = shape_of(params)
    state = params * BYTES_PER_PARAM[(w.tuning, w.base_quantization)]
    if w.tuning == "lora":
        # q,k,v,o add 8h per layer and rank; gate/up/down with a 2.7h MLP add 3 x 3.7h.
        state += w.lora_r * layers * 19 * hidden * LORA_STATE_BYTES
    tokens = w.seq_len * w.micro_batch
    # Checkpointed: a bf16 input per layer and one layer's working set (34 s b h bytes, Korthikanti et al.
    # 2022, flash attention); without: every layer's working set. Plus the fp32 logits with their gradient.
    kept = tokens * hidden * (layers * 2 + WORKING_SET) if checkpointed else tokens * hidden * layers * WORKING_SET
    activations = kept + tokens * w.vocab * 4 * 2
    # FSDP2 shards a bf16 or f32 state over the island; an NF4 base is replicated (QLoRA islands run DDP),
    # and so is everything under --shard ddp.
    shards = 1 if w.base_quantization == "nf4" or w.shard == "ddp" else num_gpus
    return Need(state / shards / 1e9, activations / 1e9, OVERHEAD_GB, checkpointed)


def fits(w: Workload, num_gpus: int, gpu_memory_gb: float) -> tuple[bool, Need]:
    """Whether the workload fits, and its need as the learner will run it: under auto, checkpointing stays off
    while a step's full activations take at most CHECKPOINT_SHARE of what state and overhead leave
    (learners/torch/checkpointing.py applies the same rule to the device's measured free memory)."""
    usable = gpu_memory_gb * USABLE_FRACTION
    if w.activation_checkpointing == "auto":
        full = per_gpu_need(w, num_gpus, checkpointed=False)
        if full.activations_gb <= CHECKPOINT_SHARE * (usable - full.state_gb - full.overhead_gb):
            return True, full
    need = per_gpu_need(w, num_gpus)
    return need.total_gb <= usable, need
