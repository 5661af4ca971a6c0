"""Resolve `--data` into files of rows: local paths, fsspec object-store URIs, or a Hub dataset pinned to a commit."""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from yeto.learners.data.jsonarray import JsonArrayFile, NotAnArray
from yeto.learners.data.jsonl import JsonlFile
from yeto.learners.data.rows import Row, TableFile

SUFFIXES = (".jsonl", ".json", ".parquet")
HUB_ID = re.compile(r"^(?:hf://datasets/)?([\w.-]+/[\w.-]+)(?:@([\w./-]+))?$")


@dataclass
class Source:
    """The files of one `--data` value, in a fixed order, and the pinned revision of a Hub dataset."""

    description: str
    files: list = field(default_factory=list)
    revision: str | None = None

    def __iter__(self) -> Iterator[Row]:
        for f in self.files:
            yield from f

    def __len__(self) -> int:
        return sum(len(f) for f in self.files)


def open_source(source: str) -> Source:
    if "://" in source and not source.startswith(("hf://", "file://")):
        return _open_fsspec(source)
    path = Path(source.removeprefix("file://")).expanduser()
    if path.exists():
        return Source(str(path), _local_files(path))
    match = HUB_ID.match(source)
    if match and not source.startswith((".", "/", "~")):
        return _open_hub(match.group(1), match.group(2))
    raise ValueError(f"--data {source}: no such file or directory (and not a Hugging Face dataset id like org/name)")


def _local_files(path: Path) -> list:
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
            return [TableFile(str(path), _load_from_disk(path))]
        files = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
        if not files:
            raise ValueError(f"--data {path}: no .jsonl, .json or .parquet files in this directory")
        return [_open_file(str(p), lambda p=p: open(p, "rb")) for p in files]
    if path.suffix not in SUFFIXES:
        raise ValueError(f"--data {path}: unsupported file type {path.suffix!r}; use .jsonl, .json or .parquet")
    return [_open_file(str(path), lambda: open(path, "rb"))]


def _open_file(name: str, opener):
    if name.endswith(".jsonl"):
        return JsonlFile(name, opener)
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq
        with opener() as f:
            return TableFile(name, pq.read_table(f))
    try:
        return JsonArrayFile(name, opener)          # streamed: memory is one row, whatever the file's size
    except NotAnArray as e:
        first = e.first
    if first != b"{":
        shown = "nothing" if not first else repr(first.decode("utf-8", "replace"))
        raise ValueError(f"{name}: expected a JSON array of rows (or JSON Lines), but the file starts with {shown}")
    lines = JsonlFile(name, opener)                 # objects one per line, saved as .json
    rows = iter(lines)
    head = next(rows, None)
    if head is not None and head.error is not None:
        raise ValueError(f"{name}: {head.error.replace('at column', 'at line 1 column', 1)} (a .json file holds an "
                         "array of rows, or JSON Lines)")
    if next(rows, None) is None:
        raise ValueError(f"{name}: expected a JSON array of rows (or JSON Lines), got one JSON object")
    return lines


def _load_from_disk(path: Path):
    import datasets
    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            raise ValueError(f"--data {path}: a DatasetDict without a 'train' split (splits: {', '.join(ds)})")
        ds = ds["train"]
    return ds.flatten_indices().data.table if ds._indices is not None else ds.data.table


def _open_fsspec(uri: str) -> Source:
    import fsspec
    try:
        fs, root = fsspec.core.url_to_fs(uri)
    except ImportError as e:
        raise ValueError(f"--data {uri}: reading this store needs a package: {e}. On learners SkyPilot mounts "
                         "the bucket instead, so only this machine needs it") from None
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if fs.isdir(root):
        names = sorted(p for p in fs.find(root) if p.endswith(SUFFIXES))
        if not names:
            raise ValueError(f"--data {uri}: no .jsonl, .json or .parquet files under this prefix")
    elif fs.exists(root):
        names = [root]
    else:
        raise ValueError(f"--data {uri}: no such object (check the URI and your credentials)")
    files = []
    for name in names:
        full = name if "://" in name else f"{protocol}://{name}"
        files.append(_open_file(full, lambda n=name: fs.open(n, "rb")))
    return Source(uri, files)


def _open_hub(repo: str, revision: str | None) -> Source:
    """Pin the revision to a commit sha first, so every learner reads exactly the same rows."""
    import datasets
    from huggingface_hub import HfApi
    try:
        sha = HfApi().dataset_info(repo, revision=revision).sha
        ds = datasets.load_dataset(repo, revision=sha, split="train")
    except Exception as e:  # noqa: BLE001 - offline, gated, missing: all are fixed by the user, and the message says how
        raise ValueError(f"--data {repo}: could not load this Hugging Face dataset ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}); check the id, the network and HF_TOKEN, "
                         "or pass a local path") from None
    table = ds.flatten_indices().data.table if ds._indices is not None else ds.data.table
    return Source(f"{repo}@{sha}", [TableFile(f"{repo}@{sha[:12]}", table)], revision=sha)

