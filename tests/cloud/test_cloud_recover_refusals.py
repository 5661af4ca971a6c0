"""`yeto recover` refuses, before anything is rented or taken down, a run it cannot recover: one without a head
record here, one already copied back, and one whose --output holds no head mirror (or another run's)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from yeto.infra.head import mirror
from yeto.infra.head import records as heads

YETO = str(Path(sys.executable).parent / "yeto")
pytestmark = pytest.mark.timeout(60)


def recover(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "YETO_HOME": str(home), "YETO_SKY_API": "nothing.here:Nothing"}   # no SkyPilot call may happen
    return subprocess.run([YETO, "recover", *args], env=env, capture_output=True, text=True, timeout=60)


def head(home: Path, run: str, state: str) -> None:
    heads.write_head(home, {**heads.new_record(home, run, price_per_hour=0.19, launched_at=0.0), "state": state,
                            "url": "tls://192.0.2.1:4222"})


def test_recover_refuses_a_run_without_a_head_here(tmp_path):
    out = recover(tmp_path, "r-nohead", "--output", str(tmp_path / "out"))
    assert out.returncode == 2 and "has no head record" in out.stderr, out.stderr


def test_recover_refuses_a_run_copied_back_already(tmp_path):
    head(tmp_path, "r-copied", "copied")
    out = recover(tmp_path, "r-copied", "--output", str(tmp_path / "out"))
    assert out.returncode == 2 and "nothing to recover" in out.stderr, out.stderr


def test_recover_refuses_an_output_without_a_head_mirror_and_names_where_it_looked(tmp_path):
    head(tmp_path, "r-nomirror", "up")
    out = recover(tmp_path, "r-nomirror", "--output", str(tmp_path / "store" / "out"))
    assert out.returncode == 2 and f"no head mirror of run r-nomirror at {tmp_path / 'store' / '.yeto-head' / 'r-nomirror'}" \
        in out.stderr, out.stderr
    assert json.loads((tmp_path / "heads" / "r-nomirror" / "head.json").read_text())["state"] == "up"   # untouched
    root = Path(mirror.mirror_root(str(tmp_path / "store" / "out"), "r-nomirror"))
    root.mkdir(parents=True)
    (root / mirror.MANIFEST).write_text(json.dumps({"run_id": "r-other", "events_through": 0}))
    out = recover(tmp_path, "r-nomirror", "--output", str(tmp_path / "store" / "out"))
    assert out.returncode == 2 and "run r-other's" in out.stderr, out.stderr


def test_recover_refuses_a_probe_of_no_time_before_it_reads_anything(tmp_path):
    out = recover(tmp_path, "r-noprobe", "--probe-s", "0")
    assert out.returncode == 2 and "--probe-s 0: give the old head a positive number of seconds" in out.stderr, out.stderr
