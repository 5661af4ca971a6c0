"""Rows of one file with their references: JSON Lines by 1-based line number (jsonl.py), a JSON array (jsonarray.py)
and Arrow by 0-based row index."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Row:
    """One raw row: a JSON object, or the reason it is not one."""

    file: str
    ref: int              # line number (JSON Lines) or row index (everything else)
    is_line: bool
    value: dict[str, Any] | None
    error: str | None = None

    @property
    def where(self) -> str:
        return f"{self.file} {'line' if self.is_line else 'row'} {self.ref}"


def json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


class TableFile:
    """Rows of an Arrow table (Parquet, a save_to_disk dataset, a Hub dataset), by row index."""

    def __init__(self, name: str, table) -> None:
        self.name, self.table = name, table

    def __len__(self) -> int:
        return self.table.num_rows

    def __iter__(self) -> Iterator[Row]:
        index = 0
        for batch in self.table.to_batches(max_chunksize=1024):
            for value in batch.to_pylist():
                yield Row(self.name, index, False, value)
                index += 1

    def get_many(self, indices: Sequence[int]) -> list[Row]:
        values = self.table.take(list(indices)).to_pylist()
        return [Row(self.name, i, False, v) for i, v in zip(indices, values)]
