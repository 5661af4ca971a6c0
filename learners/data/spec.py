"""The data spec (what `--data`, `--data-format`, `--field-map`, ... mean) and parsing of the field map."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

FORMATS = ("openai", "sharegpt", "alpaca", "text", "prompt-completion")
POLICIES = ("error", "skip")
TRAIN_ON = ("assistant", "all")
# Canonical keys a field map may rename; `<role>_tag` maps a custom role value to a canonical role.
FIELD_KEYS = ("messages", "conversations", "role", "content", "from", "value", "instruction", "input", "output",
              "system", "history", "prompt", "completion", "text", "tools")
ROLE_TAGS = ("system_tag", "user_tag", "assistant_tag", "tool_tag")


@dataclass(frozen=True, kw_only=True)
class DataSpec:
    """Everything that decides which rows are read and how they become training tokens."""

    source: str
    """HF dataset id (`org/name[@revision]`), local file or directory, or an fsspec URI (s3://, gs://, ...)."""
    data_format: str = "auto"
    """auto (detect per row), or one of FORMATS for every row."""
    field_map: Mapping[str, str] | None = None
    """Canonical key -> the key used in this data (e.g. messages=dialog), plus `<role>_tag=<custom role>`."""
    on_bad_rows: str = "error"
    """error: refuse data with bad rows; skip: train on the good rows and record which were skipped."""
    train_on: str = "assistant"
    """assistant: loss on assistant turns only; all: loss on every token of the rendered conversation."""
    seq_len: int = 512
    """Block length in tokens; a longer row is split into pieces of this length (never dropped)."""
    seed: int = 0
    """Seed of the per-epoch shuffle."""
    heldout_fraction: float = 0.0
    """Fraction of rows (chosen by a hash of the row, so stable) held out from training for evaluation."""

    def __post_init__(self) -> None:
        if self.data_format != "auto" and self.data_format not in FORMATS:
            raise ValueError(f"unknown --data-format {self.data_format!r}; choose auto or one of {', '.join(FORMATS)}")
        if self.on_bad_rows not in POLICIES:
            raise ValueError(f"unknown --on-bad-rows {self.on_bad_rows!r}; choose error or skip")
        if self.train_on not in TRAIN_ON:
            raise ValueError(f"unknown --train-on {self.train_on!r}; choose assistant or all")
        if self.seq_len < 2:
            raise ValueError(f"--seq-len must be at least 2, got {self.seq_len}")
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in [0, 1), got {self.heldout_fraction}")
        check_field_map(self.field_map or {})


def check_field_map(field_map: Mapping[str, str]) -> None:
    for key, value in field_map.items():
        if key not in FIELD_KEYS and key not in ROLE_TAGS:
            raise ValueError(f"--field-map: unknown key {key!r}; map one of {', '.join(FIELD_KEYS + ROLE_TAGS)}")
        if not value:
            raise ValueError(f"--field-map: {key}= needs a value (the key or role name used in your data)")


def parse_field_map(text: str | None) -> dict[str, str] | None:
    """`messages=dialog,role=speaker` -> {"messages": "dialog", "role": "speaker"}."""
    if not text:
        return None
    pairs = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--field-map: expected key=value, got {item!r} (e.g. messages=dialog,role=speaker)")
        pairs[key.strip()] = value.strip()
    check_field_map(pairs)
    return pairs
