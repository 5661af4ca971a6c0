"""The sha256 of a GGUF file's metadata (header and key-value pairs: the tokenizer, its chat template), weights unread.

GGUF (v2, v3, little-endian): magic `GGUF`, u32 version, u64 tensor count, u64 key-value count, then each pair as a
string key, a u32 value type and the value; tensor infos and the weights follow. transformers derives a GGUF's
tokenizer from these pairs alone, so their bytes identify it (gguf_tokenizer.py keys its cache with them). The walk
trusts no length in the file: every one is checked against the file's size, and a file it cannot walk gives None.
"""
from __future__ import annotations

import hashlib
import mmap
import struct
from pathlib import Path

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}   # value type -> bytes (fixed widths)
STRING, ARRAY = 8, 9
VERSIONS = (2, 3)
LENGTH = struct.Struct("<Q")


def metadata_digest(path: Path) -> str | None:
    """sha256 (hex) of the file's bytes from its start to the end of its key-value pairs; None where the file is no
    GGUF this walk reads (another version, big-endian, truncated, a length past its end)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            end = metadata_end(m)
            return None if end is None else hashlib.sha256(m[:end]).hexdigest()
    except (OSError, ValueError, struct.error, RecursionError):
        return None


def metadata_end(m) -> int | None:
    """The offset just past the last key-value pair, or None where the header is not GGUF v2/v3."""
    if len(m) < 24 or m[:4] != b"GGUF" or struct.unpack_from("<I", m, 4)[0] not in VERSIONS:
        return None
    (num_pairs,) = struct.unpack_from("<Q", m, 16)
    pos = 24
    for _ in range(num_pairs):
        pos = _skip_string(m, pos)
        (kind,) = struct.unpack_from("<I", m, pos)
        pos = _skip_value(m, pos + 4, kind)
    return pos


def _skip_string(m, pos: int) -> int:
    (length,) = struct.unpack_from("<Q", m, pos)
    return _within(m, pos + 8 + length)


def _skip_value(m, pos: int, kind: int) -> int:
    if kind in SIZES:
        return _within(m, pos + SIZES[kind])
    if kind == STRING:
        return _skip_string(m, pos)
    if kind != ARRAY:
        raise ValueError(f"GGUF value type {kind} is not one this reader knows")
    item, count = struct.unpack_from("<IQ", m, pos)
    pos += 12
    if item in SIZES:
        return _within(m, pos + count * SIZES[item])
    if item == STRING:           # a vocabulary's tokens and merges: the walk's one hot loop
        return _skip_strings(m, pos, count)
    for _ in range(count):       # each item takes >= 12 bytes: a count past the file's end fails at its end
        pos = _skip_value(m, pos, item)
    return pos


def _skip_strings(m, pos: int, count: int) -> int:
    length_at, size = LENGTH.unpack_from, len(m)
    for _ in range(count):       # each string takes >= 8 bytes: a count past the file's end fails at its end
        pos += 8 + length_at(m, pos)[0]
        if pos > size:
            raise ValueError("a GGUF string runs past the end of the file")
    return pos


def _within(m, end: int) -> int:
    if end > len(m):
        raise ValueError("a GGUF length runs past the end of the file")
    return end
