"""What a run's fleet entries and recipe may hold, checked when LaunchRun, RunLaunched or an island command is parsed.

The bus is untrusted: a message whose fleet or recipe breaks these rules fails validation (a MessageRejected),
so no service folds a price that is a string, a count in the billions or a recipe whose `train` is not a mapping.
The recipe is then read as its typed model (schemas/launch_recipe.py): a key no version of it holds is refused.
"""
from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from yeto.schemas.gpuspec import KNOWN_CLOUDS
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.recipe import SyncConfig

MAX_ISLANDS = 1024       # hard bounds of the schema; the launcher's own caps are lower (services/launcher/limits.py)
MAX_NODES = 64
MAX_COUNT = 1024
MAX_PRICE = 1e6          # USD per hour of one island: above it a price is a mistake or an attack, not an offer
_NAME = re.compile(r"^[A-Za-z0-9_.-]{0,64}$")
DURATIONS = ("recover_timeout_s", "heartbeat_timeout_s", "startup_timeout_s", "final_ack_timeout_s", "final_cut_timeout_s")


def number(value: Any, where: str, *, integer: bool = False, positive: bool = False, most: float | None = None) -> None:
    """A JSON number (not a bool, not a string), finite, >= 0 (> 0 if `positive`), whole if `integer`, <= `most`."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ValueError(f"{where} must be {'an integer' if integer else 'a number'}, got {type(value).__name__} {value!r:.40}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{where} must be finite and {'> 0' if positive else '>= 0'}, got {value!r}")
    if most is not None and value > most:
        raise ValueError(f"{where} must be at most {most:g}, got {value!r}")


def _optional(d: dict[str, Any], key: str, where: str, **kw: Any) -> None:
    if d.get(key) is not None:
        number(d[key], f"{where}{key}", **kw)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


def check_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """One fleet entry: a known cloud, sane names, whole positive counts, a finite non-negative price."""
    if entry.get("cloud") not in (*KNOWN_CLOUDS, "external"):    # external: a slot joined with a token (yeto join)
        raise ValueError(f"cloud must be one of {', '.join(KNOWN_CLOUDS)}, external, got {entry.get('cloud')!r:.40}")
    for key in ("gpu", "region", "instance_type"):
        if entry.get(key) is not None and not (isinstance(entry[key], str) and _NAME.match(entry[key])):
            raise ValueError(f"{key} must be a short name (letters, digits, - _ .), got {entry[key]!r:.40}")
    _optional(entry, "count", "", integer=True, positive=True, most=MAX_COUNT)
    _optional(entry, "nodes", "", integer=True, positive=True, most=MAX_NODES)
    _optional(entry, "price_per_hour", "", most=MAX_PRICE)
    if not isinstance(entry.get("spot", False), bool):
        raise ValueError(f"spot must be true or false, got {entry['spot']!r:.40}")
    return entry


def _check_sync(sync: Any, where: str) -> None:
    try:
        SyncConfig.from_dict(_mapping(sync, where))
    except TypeError as e:
        raise ValueError(f"{where}: {e}") from None


def check_recipe(recipe: dict[str, Any]) -> dict[str, Any]:
    """The recipe's parts services and learners read: train (and its sync settings), limits, timeouts, prices."""
    train = _mapping(recipe.get("train"), "train")
    _optional(train, "lr", "train.", positive=True)
    for key in ("max_steps", "seq_len", "micro_batch", "lora_r"):
        _optional(train, key, "train.", integer=True, positive=True)
    for key in ("warmup_steps", "seed"):
        _optional(train, key, "train.", integer=True)
    _check_sync(train.get("sync"), "train.sync")
    _check_sync(recipe.get("sync"), "sync")
    limits = _mapping(recipe.get("limits"), "limits")
    for key in ("max_steps", "max_tokens"):
        _optional(limits, key, "limits.", integer=True, positive=True)
    for key in ("max_time_s", "max_spend"):
        _optional(limits, key, "limits.", positive=True)
    for key in DURATIONS:
        _optional(recipe, key, "")
    _optional(recipe, "head_price_per_hour", "", most=MAX_PRICE)
    _optional(recipe, "max_crashes", "", integer=True)
    for key in ("data_check",):
        _mapping(recipe.get(key), key)
    if not isinstance(recipe.get("output", ""), (str, type(None))):
        raise ValueError(f"output must be a string, got {type(recipe['output']).__name__}")
    LaunchRecipe.upcast(recipe)     # every reader upcasts it: what parses here never fails them
    return recipe


FleetEntry = Annotated[dict[str, Any], AfterValidator(check_entry)]
Fleet = Annotated[list[FleetEntry], Field(max_length=MAX_ISLANDS)]
Recipe = Annotated[dict[str, Any], AfterValidator(check_recipe)]
Price = Annotated[float, Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)]
