"""The training recipe of a causal-LM learner: one frozen record, carried as a dict by LaunchRun."""
from __future__ import annotations

from dataclasses import dataclass, field

from yeto.learners.inner_recipe import DTYPES, SCHEDULES, InnerRecipe

TUNINGS = ("lora", "full")
QUANTIZATIONS = ("none", "nf4")
CHECKPOINTING = ("auto", "on", "off")
SHARDINGS = ("auto", "ddp", "fsdp")
_CHOICES = {"tuning": TUNINGS, "schedule": SCHEDULES, "dtype": DTYPES, "base_quantization": QUANTIZATIONS,
            "activation_checkpointing": CHECKPOINTING, "shard": SHARDINGS, "on_bad_rows": ("error", "skip")}


@dataclass(frozen=True, kw_only=True)
class TrainRecipe(InnerRecipe):
    """Everything that decides what a causal-LM learner computes; identical on every island of a run. The fields
    every backend shares are InnerRecipe's (learners/inner_recipe.py); these are the LM's own."""

    model: str
    """An alias from schemas/model_table.py, an HF id, a local model directory or a `.gguf` file."""
    data_format: str = "auto"
    """Data format for yeto.learners.data (auto detects chat JSONL, text, parquet, ...)."""
    train_on: str = "assistant"
    """Which tokens carry loss: "assistant" (chat replies only) or "all"."""
    on_bad_rows: str = "error"
    """A bad row met while training: "error" stops the learner, "skip" drops it (as launch's data check did)."""
    field_map: dict[str, str] = field(default_factory=dict)
    """Canonical data key -> this data's key (yeto.learners.data's --field-map, e.g. {"messages": "dialog"})."""
    eval_data: str = ""
    """Held-out data of its own (read whole); empty: the `heldout_fraction` split of `data`."""
    tuning: str = "lora"
    """"lora" trains low-rank adapters on a frozen base; "full" trains every weight."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch input (0 keeps every island's steps deterministic)."""
    seq_len: int = 512
    """Tokens per packed sequence."""
    base_quantization: str = "none"
    """"nf4" loads the frozen base in 4-bit NormalFloat through bitsandbytes (QLoRA; LoRA only), "none" keeps it."""
    activation_checkpointing: str = "auto"
    """Recompute each decoder layer in the backward pass: "on", "off", or "auto" (on where the memory model needs it)."""
    shard: str = "auto"
    """Inside the island: "ddp" replicas, "fsdp" FSDP2 shards, or "auto" (FSDP2 when one replica does not fit)."""
    tensor_parallel: int = 1
    """The megatron backend's tensor parallelism inside an island (`yeto launch --megatron-tp`); other backends refuse
    anything but 1 (tensor_parallel_refusal)."""

    def __post_init__(self) -> None:
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} {getattr(self, name)!r} is not one of {', '.join(choices)}")
        if self.base_quantization == "nf4" and (self.tuning != "lora" or self.shard == "fsdp"):
            raise ValueError("base_quantization nf4 (QLoRA) trains LoRA adapters on a frozen 4-bit base replicated on "
                             "every rank (DDP): use tuning lora, and shard ddp or auto (nf4 already quarters the base)")
        self.check_shared(at_least_one=("seq_len", "tensor_parallel"))

    @property
    def tokens_per_step(self) -> int:
        """Token slots one rank processes per optimizer step (padding and masked tokens included)."""
        return self.micro_batch * self.grad_accum * self.seq_len


def tensor_parallel_refusal(recipe: TrainRecipe, backend: str) -> None:
    """A backend without tensor parallelism refuses a recipe that asks for it (it would be ignored)."""
    if recipe.tensor_parallel != 1:
        raise ValueError(f"{backend} backend: tensor_parallel {recipe.tensor_parallel} is the megatron backend's "
                         "(yeto launch --island-backend megatron --megatron-tp N); this backend runs 1")
