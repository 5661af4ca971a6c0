"""The training recipe of a causal-LM learner: one frozen record, carried as a dict by LaunchRun."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

TUNINGS = ("lora", "full")
SCHEDULES = ("cosine", "constant", "linear")
DTYPES = ("auto", "bf16", "f32")
QUANTIZATIONS = ("none", "nf4")
CHECKPOINTING = ("auto", "on", "off")
SHARDINGS = ("auto", "ddp", "fsdp")
_CHOICES = {"tuning": TUNINGS, "schedule": SCHEDULES, "dtype": DTYPES, "base_quantization": QUANTIZATIONS,
            "activation_checkpointing": CHECKPOINTING, "shard": SHARDINGS, "on_bad_rows": ("error", "skip")}


@dataclass(frozen=True, kw_only=True)
class TrainRecipe:
    """Everything that decides what a learner computes; identical on every island of a run."""

    model: str
    """An alias from schemas/model_table.py, an HF id, a local model directory or a `.gguf` file."""
    data: str = ""
    """Training data: a path or dataset id understood by yeto.learners.data (empty: supplied by the caller)."""
    data_format: str = "auto"
    """Data format for yeto.learners.data (auto detects chat JSONL, text, parquet, ...)."""
    train_on: str = "assistant"
    """Which tokens carry loss: "assistant" (chat replies only) or "all"."""
    on_bad_rows: str = "error"
    """A bad row met while training: "error" stops the learner, "skip" drops it (as launch's data check did)."""
    heldout_fraction: float = 0.02
    """Fraction of examples kept out of training for the held-out loss."""
    field_map: dict[str, str] = field(default_factory=dict)
    """Canonical data key -> this data's key (yeto.learners.data's --field-map, e.g. {"messages": "dialog"})."""
    eval_every: int = 0
    """Held-out evaluation every N inner steps, reported on the tape (0: only at the end)."""
    eval_data: str = ""
    """Held-out data of its own (read whole); empty: the `heldout_fraction` split of `data`."""
    tuning: str = "lora"
    """"lora" trains low-rank adapters on a frozen base; "full" trains every weight."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_dropout: float = 0.0
    """Dropout on the LoRA branch input (0 keeps every island's steps deterministic)."""
    target_modules: tuple[str, ...] = ()
    """Module names LoRA wraps; empty picks them by architecture (learners/torch/tuning.py)."""
    lr: float = 3e-4
    """Peak inner AdamW learning rate (3e-4 suits LoRA; full tuning wants ~1e-5 to 5e-5)."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW moment decay rates."""
    warmup_steps: int = 20
    """Inner steps of linear warmup from 0 to `lr`."""
    schedule: str = "cosine"
    """After warmup: "cosine" or "linear" decays to `min_lr_ratio * lr` at `max_steps`; "constant" stays at `lr`."""
    min_lr_ratio: float = 0.1
    """Floor of the cosine schedule as a fraction of `lr`."""
    max_steps: int = 1000
    """Inner optimizer steps of one learner (the schedule's horizon and the loop's end)."""
    start_step: int = 0
    """The step a resumed lineage continues from (yeto launch --resume-from): step count, schedule, data position."""
    clip_norm: float = 1.0
    """Gradient norm clipping threshold (0 disables)."""
    micro_batch: int = 4
    """Sequences per forward pass on one rank."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer step on one rank."""
    seq_len: int = 512
    """Tokens per packed sequence."""
    seed: int = 0
    """Shared seed: LoRA / random init (identical on every island) and data order."""
    dtype: str = "auto"
    """Compute dtype: "auto" (bf16 on accelerators, f32 on CPU), "bf16" or "f32"."""
    base_quantization: str = "none"
    """"nf4" loads the frozen base in 4-bit NormalFloat through bitsandbytes (QLoRA; LoRA only), "none" keeps it."""
    activation_checkpointing: str = "auto"
    """Recompute each decoder layer in the backward pass: "on", "off", or "auto" (on where the memory model needs it)."""
    shard: str = "auto"
    """Inside the island: "ddp" replicas, "fsdp" FSDP2 shards, or "auto" (FSDP2 when one replica does not fit)."""
    sync: dict[str, Any] = field(default_factory=dict)
    """Options of the step-boundary sync (learners/diloco_sync.py), passed through unchanged."""
    pins: dict[str, Any] = field(default_factory=dict)
    """What launch pinned, {"base": ..., "data": ...} (infra/source_pins.py); each island checks it before training."""

    def __post_init__(self) -> None:
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} {getattr(self, name)!r} is not one of {', '.join(choices)}")
        if self.base_quantization == "nf4" and (self.tuning != "lora" or self.shard == "fsdp"):
            raise ValueError("base_quantization nf4 (QLoRA) trains LoRA adapters on a frozen 4-bit base replicated on "
                             "every rank (DDP): use tuning lora, and shard ddp or auto (nf4 already quarters the base)")
        for name in ("max_steps", "micro_batch", "grad_accum", "seq_len", "lora_r"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.warmup_steps < 0 or self.lr <= 0 or self.eval_every < 0:
            raise ValueError("warmup_steps and eval_every must be >= 0 and lr > 0")
        # Lists from JSON become tuples so the record stays immutable and comparable.
        object.__setattr__(self, "target_modules", tuple(self.target_modules))
        object.__setattr__(self, "betas", tuple(self.betas))

    @property
    def tokens_per_step(self) -> int:
        """Token slots one rank processes per optimizer step (padding and masked tokens included)."""
        return self.micro_batch * self.grad_accum * self.seq_len

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainRecipe:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown recipe field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainRecipe:
        return cls.from_dict(json.loads(text))

    def replace(self, **changes: Any) -> TrainRecipe:
        return dataclasses.replace(self, **changes)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value
