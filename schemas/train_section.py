"""The launch recipe's `train` section: what every learner of a run computes, typed (learners' TrainRecipe's fields)."""
from __future__ import annotations

from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from yeto.schemas.recipe import SyncConfig
from yeto.schemas.recipe_bounds import check_bounds

PosInt = Annotated[int, Field(ge=1)]
Count = Annotated[int, Field(ge=0)]
Loose = Field(strict=False)     # a JSON list where a tuple belongs: the one coercion allowed


class Section(BaseModel):
    """A recipe section: frozen, strict (a string is never a number), finite, and no key it does not know."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class SyncBase(Section):
    """What `yeto launch --resume-from/--branch-from` adds to the sync settings (services/syncer/seed.py reads it)."""

    seed: str = ""
    """The parent artifact's directory the syncer seeds θ from ("" = initial values of the learners)."""
    seed_momentum: bool = True
    """Seed the outer momentum too (a resume); a branch starts it at zero."""

    def config(self) -> SyncConfig:
        """The settings as the syncer and learners use them (SyncConfig's defaults where the recipe gave none)."""
        return SyncConfig.from_dict(self.model_dump(exclude={"seed", "seed_momentum"}))

    @model_validator(mode="after")
    def _in_range(self) -> SyncBase:
        self.config()     # SyncConfig's own checks: ranges, choices (ValueError names the setting)
        return self


_TYPES: dict[str, Any] = {"int": int, "int | None": int | None, "float": float, "str": str}
_SYNC: dict[str, Any] = {f.name: (_TYPES[str(f.type)], f.default) for f in fields(SyncConfig) if f.default is not MISSING}
if TYPE_CHECKING:       # readers use config(), seed and seed_momentum: SyncBase's
    SyncSection = SyncBase
else:                   # SyncConfig's fields, generated: the two can never drift apart
    SyncSection = create_model("SyncSection", __base__=SyncBase, **_SYNC,
                               __doc__="The run's sync settings: SyncConfig's fields, and the lineage seed.")


class TrainSection(Section):
    """learners/lm_recipe.py's TrainRecipe, field for field with the same defaults (a test holds them equal);
    `model` is empty only in recipes written by hand (tests): `yeto launch` always names one."""

    model: str = ""
    data: str = ""
    data_format: str = "auto"
    train_on: Literal["assistant", "all"] = "assistant"
    on_bad_rows: Literal["error", "skip"] = "error"
    heldout_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.02
    field_map: dict[str, str] = Field(default_factory=dict)
    eval_every: Count = 0
    eval_data: str = ""
    tuning: Literal["lora", "full"] = "lora"
    lora_r: PosInt = 16
    lora_alpha: PosInt = 32
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    target_modules: Annotated[tuple[str, ...], Loose] = ()
    lr: Annotated[float, Field(gt=0)] = 3e-4
    weight_decay: Annotated[float, Field(ge=0)] = 0.01
    betas: Annotated[tuple[float, float], Loose] = (0.9, 0.95)
    warmup_steps: Count = 20
    schedule: Literal["cosine", "constant", "linear"] = "cosine"
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)] = 0.1
    max_steps: PosInt = 1000
    start_step: Count = 0
    clip_norm: Annotated[float, Field(ge=0)] = 1.0
    micro_batch: PosInt = 4
    grad_accum: PosInt = 1
    seq_len: PosInt = 512
    seed: Count = 0
    dtype: Literal["auto", "bf16", "f32"] = "auto"
    base_quantization: Literal["none", "nf4"] = "none"
    activation_checkpointing: Literal["auto", "on", "off"] = "auto"
    shard: Literal["auto", "ddp", "fsdp"] = "auto"
    tensor_parallel: PosInt = 1
    sync: SyncSection = Field(default_factory=SyncSection)
    pins: dict[str, Any] = Field(default_factory=dict)
    """What launch pinned, {"base": ..., "data": ...} (infra/source_pins.py); each island checks it."""

    @model_validator(mode="after")
    def _bounded(self) -> TrainSection:
        check_bounds(self.__dict__)     # recipe_bounds.py: numbers no run means (a rank of 10^8) are refused here
        return self

    @property
    def tokens_per_step(self) -> int:
        """Token slots one rank processes per inner step (TrainRecipe.tokens_per_step)."""
        return self.micro_batch * self.grad_accum * self.seq_len

    def learner_recipe(self) -> dict[str, Any]:
        """The TrainRecipe dict a learner starts from (its recipe.json / $YETO_RECIPE)."""
        return self.model_dump(mode="json")
