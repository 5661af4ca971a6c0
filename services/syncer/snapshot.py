"""Atomic per-fragment snapshots: safetensors (theta, momentum, broadcast shadow) plus a JSON header.

One file per fragment, `frag-<p>.safetensors`, written to a temporary name, fsynced and renamed, so a
reader sees the old snapshot or the new one, never a torn one. The `yeto` metadata key holds the JSON
header: fingerprint, fragment, version, role and the per-learner ledger (newest generation and last
admitted step per learner), which is what resume needs to refuse replays.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save

FORMAT = 1


@dataclass
class FragmentSnapshot:
    fragment: int
    version: int
    fingerprint: str
    theta: np.ndarray
    momentum: np.ndarray
    shadow: np.ndarray
    role: str = "layers"
    ledger: dict[str, dict] = field(default_factory=dict)    # learner -> {"generation": g, "last_step": s}


def path_of(directory: Path, fragment: int) -> Path:
    return Path(directory) / f"frag-{fragment:04d}.safetensors"


def write(directory: Path, snap: FragmentSnapshot) -> tuple[Path, str]:
    """Write atomically; return (path, sha256 of the file)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    header = dict(format=FORMAT, fragment=snap.fragment, version=snap.version, fingerprint=snap.fingerprint,
                  role=snap.role, ledger=snap.ledger)
    tensors = {name: np.ascontiguousarray(getattr(snap, name), dtype=np.float32) for name in ("theta", "momentum", "shadow")}
    data = save(tensors, metadata={"yeto": json.dumps(header, sort_keys=True)})
    final = path_of(directory, snap.fragment)
    tmp = final.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)                 # the rename itself must survive a crash
    finally:
        os.close(dir_fd)
    return final, hashlib.sha256(data).hexdigest()


def read(path: Path) -> FragmentSnapshot:
    """Load one fragment snapshot; ValueError naming the file when it is not a Yeto snapshot."""
    with safe_open(str(path), framework="np") as f:
        meta = f.metadata() or {}
        if "yeto" not in meta:
            raise ValueError(f"{path} is not a Yeto syncer snapshot (no 'yeto' metadata); remove it or point --state elsewhere")
        header = json.loads(meta["yeto"])
        arrays = {name: f.get_tensor(name) for name in ("theta", "momentum", "shadow")}
    return FragmentSnapshot(fragment=header["fragment"], version=header["version"], fingerprint=header["fingerprint"],
                            role=header.get("role", "layers"), ledger=header.get("ledger", {}), **arrays)


def read_all(directory: Path) -> dict[int, FragmentSnapshot]:
    """Every fragment snapshot in `directory` (none if it does not exist); leftover temporaries are ignored."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    snaps = (read(p) for p in sorted(directory.glob("frag-*.safetensors")))
    return {s.fragment: s for s in snaps}
