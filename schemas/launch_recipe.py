"""The launch recipe, typed and versioned: one frozen model from `yeto launch` to the learners, syncer and finalizer.

LaunchRun, RunLaunched and StartIsland carry it as a dict on the wire (the tape's schema is unchanged): written by
`LaunchRecipe.wire()`, read by `LaunchRecipe.upcast(...)`, which also reads the version-less dict tapes hold from
before (version 1: timeouts and the head price at the top level, sometimes `sync` beside `train`).
"""
from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import Field, ValidationError

from yeto.schemas.train_section import Count, Section, TrainSection

RECIPE_VERSION: Final = 2
PosFloat = Annotated[float, Field(gt=0)]
TIMEOUTS = ("recover_timeout_s", "heartbeat_timeout_s", "startup_timeout_s", "final_ack_timeout_s",
            "final_cut_timeout_s", "max_crashes")
V1_KEYS = frozenset({"train", "sync", "limits", "output", "bus_url", "config", "data_check", "shard", "base_quantization",
                     "head_price_per_hour", "model", "max_steps", *TIMEOUTS})


class Limits(Section):
    """When a run ends (None = no limit): the finalizer cuts on tokens, time and spend; learners stop at max_steps."""

    max_steps: Annotated[int, Field(ge=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_time_s: PosFloat | None = None
    max_spend: PosFloat | None = None


class Timeouts(Section):
    """How long the launcher and finalizer wait (services/launcher/logic.py, services/finalizer/logic.py)."""

    recover_timeout_s: Annotated[float, Field(ge=0)] = 600.0
    """A lost island not back within this is dropped (--recover-timeout)."""
    heartbeat_timeout_s: Annotated[float, Field(ge=0)] = 300.0
    """An island silent this long after its first progress is preempted."""
    startup_timeout_s: Annotated[float, Field(ge=0)] = 1800.0
    """An island with no progress this long after its start is preempted."""
    final_ack_timeout_s: Annotated[float, Field(ge=0)] = 30.0
    """The final cut waits this long for learners' acknowledgements."""
    final_cut_timeout_s: Annotated[float, Field(ge=0)] = 900.0
    """The final cut fails when the syncer has not answered within this."""
    max_crashes: Count = 3
    """An island that crashed this many times before any progress is dropped, not restarted."""


class Prices(Section):
    """What the run costs beyond its islands (whose prices are in the fleet)."""

    head_price_per_hour: Annotated[float, Field(ge=0, le=1e6)] = 0.0


class DataCheck(Section):
    """The launch's data check (yeto/cli/launch_checks.py): the DataChecked event and the manifest's `data`."""

    source: str = ""
    revision: str | None = None
    fingerprint: str | None = None
    num_rows: Count = 0
    num_bad: Count = 0
    data_format: str = "auto"
    on_bad_rows: Literal["error", "skip"] = "error"
    formats: dict[str, int] = Field(default_factory=dict)
    num_tokens: Count | None = None
    num_over_seq_len: Count | None = None
    masking: str | None = None
    skipped: list[str] = Field(default_factory=list)


class LaunchRecipe(Section):
    """Everything a run is: what learners train, when it ends, how long services wait, where the artifact goes."""

    recipe_version: Literal[2] = RECIPE_VERSION
    train: TrainSection = Field(default_factory=TrainSection)
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
    return f"{where}: {err['msg']}"


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 (no `recipe_version`): timeouts and the head price at the top level, `shard` and `base_quantization`
    repeated there, `sync` beside `train` in hand-written recipes, None for "not given"."""
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
    given = {k: v for k, v in data.items() if v is not None}
    return {"train": train, "limits": given.get("limits") or {}, "data_check": given.get("data_check") or {},
            "timeouts": {k: given[k] for k in TIMEOUTS if k in given}, "config": given.get("config") or {},
            "prices": {k: given[k] for k in ("head_price_per_hour",) if k in given},
            **{k: given[k] for k in ("output", "bus_url") if k in given}}
