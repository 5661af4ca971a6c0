"""JSON Lines files: rows by 1-based line number, read as a stream with every line's length capped."""
from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from yeto.learners.data.rows import BOM, Row, json_type

MAX_LINE_BYTES = 32 * 1024 * 1024   # a longer JSON Lines line is a bad row, never read into memory whole


def parse_line(raw: bytes, first: bool) -> tuple[dict | None, str | None]:
    """Decode one JSON Lines line; (None, None) for a blank line, which is not a row."""
    if first and raw.startswith(BOM):
        raw = raw[len(BOM):]
    raw = raw.rstrip(b"\n").rstrip(b"\r")  # Windows line endings
    if not raw.strip():
        return None, None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"not valid JSON: {e.msg} at column {e.colno}"
    except RecursionError:
        return None, "JSON nested too deeply to read (keep rows to a few hundred levels of nesting)"
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        return None, f"not readable JSON: {e}"
    if not isinstance(value, dict):
        return None, f"expected a JSON object, got {json_type(value)}"
    return value, None


def read_lines(f, max_line: int) -> Iterator[tuple[bytes | None, int]]:
    """(line, its length in bytes) of a binary file; the line is None when over `max_line` (read past in pieces)."""
    while raw := f.readline(max_line + 1):
        if len(raw) <= max_line or raw.endswith(b"\n"):
            yield raw, len(raw)
            continue
        size = len(raw)
        while raw and not raw.endswith(b"\n"):
            raw = f.readline(1 << 20)
            size += len(raw)
        yield None, size


class JsonlFile:
    """A JSON Lines file read as a stream; random access through byte offsets indexed in one pass."""

    def __init__(self, name: str, opener, max_line: int = MAX_LINE_BYTES) -> None:
        self.name, self._open, self.max_line = name, opener, max_line
        self._offsets: list[int] | None = None  # byte offset of each non-blank line
        self._lines: list[int] = []

    def _row(self, number: int, raw: bytes | None) -> Row | None:
        if raw is None:
            return Row(self.name, number, True, None, f"line longer than {self.max_line} bytes, the most one row may be")
        value, error = parse_line(raw, number == 1)
        return Row(self.name, number, True, value, error) if value is not None or error is not None else None

    def __iter__(self) -> Iterator[Row]:
        with self._open() as f:
            for number, (raw, _) in enumerate(read_lines(f, self.max_line), start=1):
                if (row := self._row(number, raw)) is not None:
                    yield row

    def _index(self) -> None:
        offsets, lines, pos = [], [], 0
        with self._open() as f:
            for number, (raw, size) in enumerate(read_lines(f, self.max_line), start=1):
                if raw is None or raw.strip(b" \t\r\n") not in (b"", BOM):
                    offsets.append(pos)
                    lines.append(number)
                pos += size
        self._offsets, self._lines = offsets, lines

    def __len__(self) -> int:
        if self._offsets is None:
            self._index()
        return len(self._offsets)

    def get_many(self, indices: Sequence[int]) -> list[Row]:
        len(self)
        rows = []
        with self._open() as f:
            for i in indices:
                f.seek(self._offsets[i])
                raw, _ = next(read_lines(f, self.max_line))
                rows.append(self._row(self._lines[i], raw))
        return rows
