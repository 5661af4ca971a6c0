"""Fixtures of the cloud rehearsal: a world of network namespaces under a temporary $YETO_REHEARSAL_DIR, removed
by name (every namespace, veth and the bridge, and every process in them) whatever the test did."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import rehearsal
import rehearsal_jobs
import rehearsal_net

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def rehearsal_dir(tmp_path, monkeypatch) -> Path:
    """The world's folder; this process (and what it starts) uses the rehearsal as its SkyApi."""
    why = rehearsal_net.available()
    if why:
        pytest.skip(f"no network namespaces for the rehearsal: {why}")
    root = tmp_path / "rehearsal"
    root.mkdir()
    try:
        rehearsal.world_up(root)
        monkeypatch.setenv(rehearsal_jobs.REHEARSAL_DIR_ENV, str(root))
        monkeypatch.setenv("YETO_SKY_API", rehearsal_jobs.SKY_API)
        # `tests.cloud.rehearsal` is found from the repository root, as the head's processes find it from its workdir
        monkeypatch.setenv("PYTHONPATH", str(REPO))
        yield root
    finally:
        rehearsal.world_down(root)
