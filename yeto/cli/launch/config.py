"""`yeto launch -c run.yaml|run.toml`: launch settings from a file (Yeto, axolotl or LLaMA-Factory key names), under the flags."""
from __future__ import annotations

import argparse
import difflib
import json
from pathlib import Path
from typing import Any

from yeto.cli.config_keys import ALIASES, FLAGS, INSTEAD, NOTED, VALUES

NOT_SETTINGS = {"help", "config", "explicit", "config_applied", "func", "command"}


def track(action: argparse.Action) -> None:
    """Record the action's dest in `namespace.explicit` when its flag is typed: flags beat the config file."""
    base = type(action)

    class Tracked(base):  # type: ignore[valid-type, misc]
        def __call__(self, parser, namespace, values, option_string=None):
            namespace.explicit = {*getattr(namespace, "explicit", ()), self.dest}
            super().__call__(parser, namespace, values, option_string)

    action.__class__ = Tracked


def load(path: str) -> dict[str, Any]:
    """The file's top-level table: YAML (.yaml/.yml) or TOML (.toml)."""
    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as e:
        raise ValueError(f"--config {path}: cannot read it ({e.strerror})") from None
    try:
        if p.suffix == ".toml":
            import tomllib
            data = tomllib.loads(text)
        else:
            import yaml
            data = yaml.safe_load(text) or {}
    except Exception as e:  # noqa: BLE001 - any parser's error is the user's file: one line naming it
        raise ValueError(f"--config {path}: not valid {'TOML' if p.suffix == '.toml' else 'YAML'} ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a table of settings at the top level")
    return data


def settings_of(data: dict[str, Any], actions: dict[str, argparse.Action]) -> tuple[dict[str, Any], list[str]]:
    """File keys -> launch settings (dest: value), and notes on keys accepted without effect. Every key Yeto cannot
    use is refused in one error, each with what to do: the table's answer where it has one, else the nearest names."""
    out: dict[str, Any] = {}
    notes = [f"{k}: ignored ({NOTED[k]})" for k, v in data.items() if k in NOTED and v not in (None, False, "")]
    refused: list[str] = []
    for key, value in data.items():
        if key == "optimizer" and value and not str(value).startswith("adamw"):
            refused.append(f"optimizer {value!r}: Yeto's inner optimizer is AdamW (adamw_* keys map to it)")
            continue
        if key in NOTED or (key == "chat_template" and value in (None, "tokenizer_default")):
            continue
        if key in INSTEAD:
            refused.append(f"{key}: {INSTEAD[key]}")
            continue
        if key == "datasets":
            key, value = "data", _first_dataset(value, out)
        if key in FLAGS:
            dest, table = FLAGS[key]
            key, value = dest, table.get(value, value)
        dest = ALIASES.get(key, key.replace("-", "_"))
        if dest not in actions:
            refused.append(_unknown(key, actions))
            continue
        if value is None:       # an empty key (`lora_model_dir:`) sets nothing
            continue
        if key in ("adapter", "finetuning_type") and value == "qlora":
            out["base_quantization"] = "nf4"
        if dest in VALUES:
            value = VALUES[dest].get(value, value)
        if isinstance(value, list) and dest == "target_modules":
            value = ",".join(map(str, value))
        if dest == "target_modules" and value in ("all", "all-linear"):
            continue            # LLaMA-Factory's default: every linear layer, as Yeto's by-architecture pick
        try:
            out[dest] = _typed(actions[dest], value, key)
        except ValueError as e:
            refused.append(str(e).removeprefix("--config: "))
    if refused:
        head = "a key Yeto cannot use" if len(refused) == 1 else f"{len(refused)} keys Yeto cannot use"
        also = "".join(f"\n  {n}" for n in notes)
        raise ValueError(f"--config: {head} (docs/CONFIG.md):" + "".join(f"\n  {r}" for r in refused)
                         + (f"\nand accepted without effect:{also}" if also else ""))
    return out, notes


def _unknown(key: str, actions: dict[str, argparse.Action]) -> str:
    near = difflib.get_close_matches(key, [*actions, *ALIASES, *FLAGS, *NOTED], n=3, cutoff=0.75)
    return f"unknown key {key!r}" + (f"; did you mean {', '.join(near)}?" if near else
                                     "; docs/CONFIG.md lists the keys Yeto reads")


def _first_dataset(value: Any, out: dict[str, Any]) -> Any:
    """axolotl's `datasets: [{path, type}]`: one dataset; its type names the data format where one maps."""
    items = value if isinstance(value, list) else [value]
    if len(items) != 1:
        raise ValueError(f"--config: datasets lists {len(items)} datasets; Yeto trains on one (`data`)")
    item = items[0]
    if isinstance(item, dict):
        kind = {"alpaca": "alpaca", "sharegpt": "sharegpt", "chat_template": "auto", "completion": "text"}
        if item.get("type") is not None:
            out["data_format"] = kind.get(str(item["type"]), "auto")
        return item.get("path")
    return item


def _typed(action: argparse.Action, value: Any, key: str) -> Any:
    convert = action.type
    repeated = isinstance(action, (argparse._AppendAction, argparse._ExtendAction))   # --env-from-host, --report-to
    if repeated and not isinstance(value, list):
        value = [value]
    if callable(convert) and not isinstance(value, bool):
        try:
            value = convert(value) if not isinstance(value, list) else [convert(v) for v in value]
        except (TypeError, ValueError) as e:
            raise ValueError(f"--config: {key}: {value!r} is not valid here ({e})") from None
    if repeated:    # extend's type returns lists: flatten as the flag repeated would
        value = [x for v in value for x in (v if isinstance(v, list) else [v])]
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"--config: {key}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return value


def apply(args, parser_actions: dict[str, argparse.Action]) -> list[str]:
    """Fill every setting not given as a flag from args.config; return the notes to print."""
    if not args.config:
        return []
    values, notes = settings_of(load(args.config), parser_actions)
    explicit: set[str] = getattr(args, "explicit", set())
    for dest, value in values.items():
        if dest not in explicit:
            setattr(args, dest, value)
    return notes


def settings(args, dests) -> dict[str, Any]:
    """The resolved launch settings (file under flags), JSON-ready, as stored in LaunchRun.recipe["config"]."""
    return {d: json.loads(json.dumps(getattr(args, d, None), default=str)) for d in sorted(dests) if d not in NOT_SETTINGS}
