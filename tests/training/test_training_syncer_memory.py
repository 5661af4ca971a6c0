"""The syncer's memory: the model (schemas/syncer_memory.py) against a real syncer process's peak RSS, the row growth
it assumes, and snapshots streamed to disk and read back memory-mapped (never a second copy of the model in RAM)."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from yeto.schemas.recipe import SyncConfig
from yeto.schemas.syncer_memory import allocated_rows, syncer_memory
from yeto.services.syncer import snapshot
from yeto.services.syncer.rows import FragmentRows

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


def test_a_real_syncer_process_peaks_within_a_fifth_of_the_model():
    out = subprocess.run([sys.executable, "benchmarks/memory.py", "--sizes", "8", "--learners", "3"], cwd=ROOT,
                         capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr
    error = float(out.stdout.strip().splitlines()[-1].removeprefix("memory_model_error="))
    assert error <= 0.2, out.stdout


@pytest.mark.parametrize("num_slots", [1, 3, 4, 5, 11, 30])
def test_the_model_grows_rows_as_fragment_rows_does(num_slots):
    rows = FragmentRows(np.zeros(8, dtype=np.float32))
    for slot in range(num_slots):
        rows.push(slot)
    assert rows.rows.shape[0] == allocated_rows(num_slots)


def test_sharding_divides_a_process_share_but_not_the_head_total():
    config = SyncConfig(num_fragments=8)
    one, four = (syncer_memory(10**9, num_learners=4, config=config, num_syncers=n) for n in (1, 4))
    assert four.state == pytest.approx(one.state / 4) and four.wire < one.wire / 2   # partial messages: per process
    assert four.process < one.process / 2 < one.process < four.head   # each shard has its own transient
    more = syncer_memory(10**9, num_learners=8, config=config)
    assert more.process > one.process, "each learner adds a resident push row and held messages"
    with pytest.raises(ValueError):
        syncer_memory(10, num_learners=0, config=config)


def snap(n: int = 1000) -> snapshot.FragmentSnapshot:
    rng = np.random.default_rng(1)
    theta, momentum, shadow = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    return snapshot.FragmentSnapshot(fragment=3, version=7, fingerprint="f" * 64, theta=theta, momentum=momentum,
                                     shadow=shadow, ledger={"l0": {"generation": 1, "last_step": 9}})


def test_a_streamed_snapshot_is_plain_safetensors_hashed_as_written_and_read_back_mapped(tmp_path):
    s = snap()
    path, sha = snapshot.write(tmp_path, s)
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    with safe_open(str(path), framework="np") as f:             # any safetensors reader takes it
        assert np.array_equal(f.get_tensor("momentum"), s.momentum)
    back = snapshot.read(path)
    assert isinstance(back.theta, np.memmap), "restoring maps the file instead of copying it onto the heap"
    assert (back.fragment, back.version, back.ledger) == (3, 7, s.ledger)
    for name in snapshot.NAMES:
        assert np.array_equal(getattr(back, name), getattr(s, name))
    assert not list(tmp_path.glob("*.tmp*"))


def test_snapshots_written_by_the_safetensors_library_still_read(tmp_path):
    s = snap(5)
    path = snapshot.path_of(tmp_path, 3)
    save_file({n: getattr(s, n) for n in snapshot.NAMES}, str(path), metadata={"yeto": '{"fragment": 3, "version": 7, '
                                                                                   '"fingerprint": "ff"}'})
    back = snapshot.read(path)
    assert back.version == 7 and np.array_equal(back.shadow, s.shadow)
    empty = snapshot.FragmentSnapshot(fragment=0, version=0, fingerprint="f", theta=np.zeros(0, np.float32),
                                      momentum=np.zeros(0, np.float32), shadow=np.zeros(0, np.float32))
    assert snapshot.read(snapshot.write(tmp_path, empty)[0]).theta.size == 0
