"""Tokenized rows kept from the CLI's data check for the learners of the same host, so no row is encoded twice.

`yeto launch` encodes every row for its token statistics; local learners then encoded them again before their
first step (benchmarks/startup.py, `data`). The check writes each row's ids and labels under
`$YETO_HOME/cache/tokens/<key>.bin`; a learner on the same host reads them instead of encoding. The key is the
sha256 of everything an encoding depends on:
  - the data: each local file's sha256 (as infra/source_pins.py pins them; a Hub dataset is never cached);
  - the tokenizer: its Rust tokenizer serialized, chat template, named special tokens and EOS id (so a changed
    tokenizer.json, template or special token misses, whichever loader read it);
  - train_on, data_format, field_map, and this module's VERSION (bump it when tokenize.py encodes differently).
seq_len is not in it: rows are cached before packing, so launches at other lengths share them.

The file is read as hostile: a header line (JSON, the key and the counts), then int64 offsets and int32 ids and
labels. The header's counts must give exactly the file's size, the offsets must rise from 0 to the token count,
every id must lie in the vocabulary and every label be -100 or its id; anything else is a miss (logged), never
an error. Rows the check rejected have no entry (offset -1) and are encoded, and refused, as before.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from array import array
from pathlib import Path

import numpy as np

from yeto.learners.data.tokenize import IGNORE, Encoded

VERSION = 1
MAX_TOKENS = 32 * 2**20        # at most this many tokens cached (256 MiB of ids and labels, in the check and a learner)
MAX_HEADER = 4096
log = logging.getLogger("yeto.data")


def cache_dir(home: str | Path | None = None) -> Path:
    from yeto.infra.settings import load
    return Path(load(state_dir=home).state_dir) / "cache" / "tokens"


def cache_key(spec, tokenizer) -> str | None:
    """The key of `spec`'s rows encoded by `tokenizer`, or None where the data is not local files."""
    from yeto.infra.source_pins import local_files
    path = Path(str(spec.source).removeprefix("file://")).expanduser()
    if not path.exists():
        return None
    backend = tokenizer.backend_tokenizer
    tok = hashlib.sha256(backend.to_str().encode())
    tok.update(json.dumps([tokenizer.chat_template, dict(tokenizer.special_tokens_map), tokenizer.eos_token_id],
                          sort_keys=True, default=str).encode())
    what = {"version": VERSION, "data": local_files(path, model=False), "tokenizer": tok.hexdigest(),
            "train_on": spec.train_on, "data_format": spec.data_format, "field_map": spec.field_map}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


class Recorder:
    """Collects the check's encodings row by row (global row index order) and writes them once complete."""

    def __init__(self, key: str) -> None:
        self.key, self.offsets, self.ids, self.labels = key, array("q"), array("i"), array("i")
        self.full = False

    def add(self, row_index: int, enc: Encoded | None) -> None:
        if self.full:
            return
        while len(self.offsets) < row_index:
            self.offsets.append(-1)            # a row the check rejected, or one it skipped
        if enc is None or not enc.input_ids:
            self.offsets.append(-1)
            return
        if len(self.ids) + len(enc.input_ids) > MAX_TOKENS:
            self.full = True
            return
        self.offsets.append(len(self.ids))
        self.ids.extend(enc.input_ids)
        self.labels.extend(enc.labels)

    def write(self, folder: Path, num_rows: int) -> Path | None:
        if self.full:
            return None
        while len(self.offsets) < num_rows:
            self.offsets.append(-1)
        header = json.dumps({"key": self.key, "num_rows": num_rows, "num_tokens": len(self.ids)}).encode() + b"\n"
        folder.mkdir(parents=True, exist_ok=True)
        path, tmp = folder / f"{self.key}.bin", folder / f".{self.key}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(header)
            f.write(self.offsets.tobytes())
            f.write(self.ids.tobytes())
            f.write(self.labels.tobytes())
        os.replace(tmp, path)                   # readers see a whole file or none
        return path


class Cached:
    """Encodings of a dataset's rows by global row index (None: not cached, encode it)."""

    def __init__(self, offsets: np.ndarray, ids: np.ndarray, labels: np.ndarray) -> None:
        self.offsets, self.ids, self.labels = offsets, ids, labels
        kept = np.flatnonzero(offsets >= 0)
        self.ends = np.full(len(offsets), -1, dtype=np.int64)      # each cached row's end: the next one's start
        if len(kept):
            self.ends[kept[:-1]] = offsets[kept[1:]]
            self.ends[kept[-1]] = len(ids)

    def __len__(self) -> int:
        return len(self.offsets)

    def get(self, row: int) -> Encoded | None:
        start, end = int(self.offsets[row]), int(self.ends[row])
        if start < 0:
            return None
        return Encoded(self.ids[start:end].tolist(), self.labels[start:end].tolist())


def load(folder: Path, key: str, *, num_rows: int, vocab_size: int) -> Cached | None:
    """The cached rows under `key`, or None (missing, another key, or anything about the file is wrong)."""
    path = folder / f"{key}.bin"
    try:
        with open(path, "rb") as f:
            head = f.readline(MAX_HEADER)
            meta = json.loads(head)
            size = os.fstat(f.fileno()).st_size
            n, t = int(meta["num_rows"]), int(meta["num_tokens"])
            if meta["key"] != key or n != num_rows or t < 0 or size != len(head) + 8 * n + 8 * t:
                raise ValueError("header does not match the key, the data or the file's size")
            offsets = np.fromfile(f, dtype="<i8", count=n)
            ids = np.fromfile(f, dtype="<i4", count=t)
            labels = np.fromfile(f, dtype="<i4", count=t)
        _check(offsets, ids, labels, t, vocab_size)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("token cache %s not used: %s", path.name, e)
        return None
    return Cached(offsets, ids, labels)


def _check(offsets: np.ndarray, ids: np.ndarray, labels: np.ndarray, num_tokens: int, vocab_size: int) -> None:
    kept = offsets[offsets >= 0]
    if len(kept) and (kept[0] != 0 or np.any(np.diff(kept) <= 0) or kept[-1] >= max(num_tokens, 1)):
        raise ValueError("offsets do not rise from 0 within the tokens")
    if not len(kept) and num_tokens:
        raise ValueError("tokens without rows")
    if num_tokens and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError("an id outside the vocabulary")
    if np.any((labels != IGNORE) & (labels != ids)):
        raise ValueError("a label neither -100 nor its token")


_LOADED: dict[tuple[str, int], tuple[object, Cached | None]] = {}


def rows_for(spec, tokenizer, num_rows: int) -> Cached | None:
    """The cached encodings of `spec`'s rows under `tokenizer` where this host's data check left them, read once
    per process (every epoch and the held-out set reuse them); None: encode as before."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    memo = (json.dumps([spec.source, spec.train_on, spec.data_format, spec.field_map], default=str), id(tokenizer))
    if memo not in _LOADED:
        key = cache_key(spec, tokenizer)
        found = None if key is None else load(cache_dir(), key, num_rows=num_rows,
                                                vocab_size=backend.get_vocab_size(with_added_tokens=True))
        _LOADED[memo] = (tokenizer, found)      # the tokenizer held, so its id names it while the entry lives
    return _LOADED[memo][1]
