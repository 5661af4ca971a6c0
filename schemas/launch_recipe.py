"""The launch recipe, typed and versioned: one frozen model from `yeto launch` to the learners, syncer and finalizer.

LaunchRun, RunLaunched and StartIsland carry it as a dict on the wire (the tape's schema is unchanged): written by
`LaunchRecipe.wire()`, read by `LaunchRecipe.upcast(...)`, which also reads the version-less dict tapes hold from
before (version 1: timeouts and the head price at the top level, sometimes `sync` beside `train`).
"""
from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, ValidationError

from yeto.schemas.diffusion_section import DiffusionSection
from yeto.schemas.learner_contract import backend, backend_for
from yeto.schemas.recipe_sections import TIMEOUTS, DataCheck, Limits, Prices, Timeouts
from yeto.schemas.train_section import Section, TrainSection

RECIPE_VERSION: Final = 2
V1_KEYS = frozenset({"train", "sync", "limits", "output", "bus_url", "config", "data_check", "shard", "base_quantization",
                     "head_price_per_hour", "model", "max_steps", "model_kind", "diffusion", *TIMEOUTS})


class LaunchRecipe(Section):
    """Everything a run is: what learners train, when it ends, how long services wait, where the artifact goes."""

    recipe_version: Literal[2] = RECIPE_VERSION
    model_kind: Literal["lm", "diffusion"] = "lm"
    """Which learner trains (`yeto launch --model-kind`): the causal-LM learner, or the diffusion learner."""
    island_backend: str = ""
    """The learner backend (`yeto launch --island-backend`, schemas/learner_contract.py); "" = model_kind's first."""
    oversubscribe_cpus: bool = False
    """`yeto launch --oversubscribe-cpus`: up to two local CPU learner processes a CPU (schemas/capacity.py)."""
    train: TrainSection = Field(default_factory=TrainSection)
    diffusion: DiffusionSection = Field(default_factory=DiffusionSection)
    """The diffusion learner's own settings (schemas/diffusion_section.py), read with model_kind diffusion."""
    limits: Limits = Field(default_factory=Limits)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    prices: Prices = Field(default_factory=Prices)
    data_check: DataCheck = Field(default_factory=DataCheck)
    output: str = ""
    """Where the artifact goes: a local path, a store URI or hf://org/repo ("" = the run folder)."""
    bus_url: str = ""
    """The URL cloud islands reach the bus at (the head's); local islands use the launcher's."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Every launch setting as resolved (flags over --config), a record for `yeto describe` and the manifest."""

    @classmethod
    def upcast(cls, data: Any) -> LaunchRecipe:
        """The recipe of any shipped version; ValueError names each bad or unknown key."""
        if isinstance(data, LaunchRecipe):
            return data
        if not isinstance(data, dict):
            raise ValueError(f"a recipe is a mapping, got {type(data).__name__}")
        version = data.get("recipe_version", 1)
        if version not in (1, RECIPE_VERSION):
            raise ValueError(f"recipe_version {version!r}: this Yeto reads versions 1 and {RECIPE_VERSION} (a newer "
                             f"Yeto wrote it: upgrade this one)")
        try:
            return cls.model_validate(_from_v1(data) if version == 1 else data)
        except ValidationError as e:
            raise ValueError("invalid recipe: " + "; ".join(_say(err) for err in e.errors())) from None

    @property
    def learner_module(self) -> str:
        """The module the launcher starts for this run's learners (`python -m`; the same flags for every kind)."""
        return (backend(self.island_backend) if self.island_backend else backend_for(self.model_kind)).module

    def learner_recipe(self) -> dict[str, Any]:
        """The learner's recipe.json: the train section, with the diffusion section flattened in for diffusion."""
        extra = self.diffusion.model_dump(mode="json") if self.model_kind == "diffusion" else {}
        return {**self.train.learner_recipe(), **extra}

    def wire(self) -> dict[str, Any]:
        """The dict LaunchRun carries (JSON types)."""
        return self.model_dump(mode="json")

    def updated(self, **sections: Any) -> LaunchRecipe:
        """A copy with top-level values replaced (a dict given for a section merges into it), validated again."""
        data = self.model_dump()
        for key, value in sections.items():
            data[key] = {**data[key], **value} if isinstance(value, dict) and isinstance(data.get(key), dict) else value
        return LaunchRecipe.upcast(data)


def _say(err: Any) -> str:
    where = ".".join(str(p) for p in err["loc"]) or "recipe"
    if err["type"] == "extra_forbidden":
        return f"{where}: unknown key (recipe v{RECIPE_VERSION} has no such setting: a typo, or a newer Yeto's recipe)"
    return f"{where}: {str(err['msg']).removeprefix('Value error, ')}"


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 (no `recipe_version`): timeouts and the head price at the top level, `shard` and `base_quantization`
    repeated there, `sync` beside `train` in hand-written recipes, None for "not given", `on_bad_rows` only in
    `data_check`."""
    if unknown := sorted(set(data) - V1_KEYS):
        raise ValueError(f"invalid recipe: {', '.join(unknown)}: unknown key(s) of a version-1 recipe "
                         f"(it holds {', '.join(sorted(V1_KEYS))})")
    train = data.get("train") or {}
    if not isinstance(train, dict):
        raise ValueError(f"invalid recipe: train must be a mapping, got {type(train).__name__}")
    train = {k: v for k, v in train.items() if v is not None}
    for key in ("model", "max_steps", "shard", "base_quantization", "sync"):    # the copies; train's own win
        if data.get(key) is not None and key not in train:
            train[key] = data[key]
    check = data.get("data_check")
    if isinstance(check, dict) and check.get("on_bad_rows") and "on_bad_rows" not in train:
        train["on_bad_rows"] = check["on_bad_rows"]     # v1 learners never got it: what launch was told, now they do
    given = {k: v for k, v in data.items() if v is not None}
    return {"train": train, "limits": given.get("limits") or {}, "data_check": given.get("data_check") or {},
            "timeouts": {k: given[k] for k in TIMEOUTS if k in given}, "config": given.get("config") or {},
            "prices": {k: given[k] for k in ("head_price_per_hour",) if k in given},
            **{k: given[k] for k in ("output", "bus_url", "model_kind", "diffusion") if k in given}}
