"""A `.json` file holding an array of rows, read in bounded memory: one pass finds each row's byte span, and a row is
parsed only when it is read, so memory is one row (and a 16-byte index entry per row), never the whole array.

The pass follows the array's structure (strings with their escapes, brackets, the commas at the array's own level) in
chunks, at C speed between the bytes that matter. A structural error (a missing `]`, a stray byte between rows) refuses
the file with where it is; a row that is not valid JSON, not an object, nested too deeply or over MAX_ROW_BYTES is a
bad row with its index, like a bad JSON Lines line.
"""
from __future__ import annotations

import re
from array import array
from collections.abc import Iterator, Sequence

from yeto.learners.data.jsonl import MAX_LINE_BYTES, parse_line
from yeto.learners.data.rows import BOM, Row

MAX_ROW_BYTES = MAX_LINE_BYTES   # a longer row is a bad row, never read into memory
CHUNK = 1 << 20
_OUTSIDE = re.compile(rb'["\[\]{},]')          # what changes the structure outside a string
_INSIDE = re.compile(rb'["\\]')                # what ends a string, or escapes the next byte
_SPACE = b" \t\r\n"
_CLOSE = {ord("]"): ord("["), ord("}"): ord("{")}


class NotAnArray(ValueError):
    """The file's top-level value is not an array: `.first` is its first byte (b"" for an empty file)."""

    def __init__(self, first: bytes):
        super().__init__(first)
        self.first = first


def _first_byte(f) -> tuple[bytes, int]:
    """The first byte that is not whitespace (after a BOM), and its offset."""
    head = f.read(len(BOM))
    pos = len(BOM) if head == BOM else 0
    f.seek(pos)
    while chunk := f.read(CHUNK):
        stripped = chunk.lstrip(_SPACE)
        if stripped:
            return stripped[:1], pos + len(chunk) - len(stripped)
        pos += len(chunk)
    return b"", pos


def index(f, name: str) -> tuple[array, array]:
    """(starts, ends): the byte span of every row of the top-level array in binary file `f`. NotAnArray when the
    top-level value is not an array; ValueError (saying where) when the array's structure is broken."""
    first, at = _first_byte(f)
    if first != b"[":
        raise NotAnArray(first)
    f.seek(at + 1)
    starts, ends = array("q"), array("q")
    stack = bytearray(b"[")                 # open brackets; its length is the depth
    in_string = escaped = False
    row_start, base = at + 1, at + 1
    while chunk := f.read(CHUNK):
        pos = 0
        if escaped:                         # the escape's byte began this chunk
            pos, escaped = 1, False
        while True:
            if in_string:
                m = _INSIDE.search(chunk, pos)
                if m is None:
                    break
                if m.group() == b"\\":
                    pos = m.end() + 1
                    if pos > len(chunk):
                        escaped = True
                        break
                    continue
                in_string, pos = False, m.end()
                continue
            m = _OUTSIDE.search(chunk, pos)
            if m is None:
                break
            byte, pos = chunk[m.start()], m.end()
            if byte == ord('"'):
                in_string = True
            elif byte in (ord("["), ord("{")):
                stack.append(byte)
            elif byte in _CLOSE:
                if stack[-1] != _CLOSE[byte]:
                    raise ValueError(f"{name}: not valid JSON: '{chr(byte)}' closes a '{chr(stack[-1])}' at byte "
                                     f"{base + m.start()}")
                stack.pop()
                if not stack:               # the array's own ']': the last row ends here
                    _add(starts, ends, row_start, base + m.start(), f, name)
                    _rest_is_space(f, chunk[pos:], base + pos, name)
                    return starts, ends
            elif len(stack) == 1:           # a comma between rows
                _add(starts, ends, row_start, base + m.start(), f, name, comma=True)
                row_start = base + pos
        base += len(chunk)
    raise ValueError(f"{name}: not valid JSON: the file ends inside the array (after {len(starts)} rows); "
                     "is it truncated?")


def _add(starts: array, ends: array, start: int, end: int, f, name: str, comma: bool = False) -> None:
    """Keep a row's span; an empty one is no row only as the whole of `[]`."""
    if end - start <= 64:                   # short: check here that it is not only whitespace
        here = f.tell()
        f.seek(start)
        blank = not f.read(end - start).strip(_SPACE)
        f.seek(here)
        if blank:
            if comma or starts:
                raise ValueError(f"{name}: not valid JSON: no value before the comma at byte {end} (row {len(starts)})"
                                 if comma else f"{name}: not valid JSON: a comma before the ']' at byte {end}")
            return
    starts.append(start)
    ends.append(end)


def _rest_is_space(f, tail: bytes, at: int, name: str) -> None:
    while True:
        stripped = tail.lstrip(_SPACE)
        if stripped:
            where = at + len(tail) - len(stripped)
            raise ValueError(f"{name}: not valid JSON: more after the array's closing ']' (byte {where})")
        at += len(tail)
        if not (tail := f.read(CHUNK)):
            return


class JsonArrayFile:
    """The rows of a JSON array file by 0-based index, each parsed when read."""

    def __init__(self, name: str, opener, max_row: int = MAX_ROW_BYTES) -> None:
        self.name, self._open, self.max_row = name, opener, max_row
        with opener() as f:
            self._starts, self._ends = index(f, name)

    def __len__(self) -> int:
        return len(self._starts)

    def _read(self, f, i: int) -> Row:
        size = self._ends[i] - self._starts[i]
        if size > self.max_row:
            return Row(self.name, i, False, None, f"row of {size} bytes, longer than {self.max_row}, the most one row may be")
        f.seek(self._starts[i])
        value, error = parse_line(f.read(size).strip(_SPACE), False)
        if value is None and error is None:
            error = "no value between two commas"
        return Row(self.name, i, False, value, error)

    def __iter__(self) -> Iterator[Row]:
        with self._open() as f:
            for i in range(len(self)):
                yield self._read(f, i)

    def get_many(self, indices: Sequence[int]) -> list[Row]:
        with self._open() as f:
            return [self._read(f, i) for i in indices]
