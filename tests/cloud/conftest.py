"""Fixtures of the cloud rehearsal: a world of network namespaces under a temporary $YETO_REHEARSAL_DIR, removed
by name (every namespace, veth and the bridge, and every process in them) whatever the test did."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import rehearsal_jobs
import rehearsal_net
import rehearsal_world

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def world_at(root: Path, names: dict = rehearsal_net.NAMES):
    """A world under `root` (`names`: its namespaces' prefixes); this process (and what it starts) uses the rehearsal
    as its SkyApi meanwhile."""
    why = rehearsal_net.available()
    if why:
        pytest.skip(f"no network namespaces for the rehearsal: {why}")
    root.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        try:
            rehearsal_world.world_up(root, names)
            mp.setenv(rehearsal_jobs.REHEARSAL_DIR_ENV, str(root))
            mp.setenv("YETO_SKY_API", rehearsal_jobs.SKY_API)
            # `tests.cloud.rehearsal` is found from the repository root (the head's processes: from its workdir)
            mp.setenv("PYTHONPATH", str(REPO))
            yield root
        finally:
            rehearsal_world.world_down(root)


@pytest.fixture
def rehearsal_dir(tmp_path) -> Path:
    with world_at(tmp_path / "rehearsal") as root:
        yield root


@pytest.fixture(scope="module")
def module_rehearsal_dir(tmp_path_factory) -> Path:
    with world_at(tmp_path_factory.mktemp("world") / "rehearsal") as root:
        yield root


@pytest.fixture
def head_cluster_rehearsal_dir(tmp_path) -> Path:
    """A world whose names are the head-cluster rehearsal's own (rehearsal_net.HEAD_CLUSTER_NAMES)."""
    with world_at(tmp_path / "rehearsal", rehearsal_net.HEAD_CLUSTER_NAMES) as root:
        yield root


@pytest.fixture
def syncer_vm_rehearsal_dir(tmp_path) -> Path:
    """A world whose names are the syncer's-VM rehearsal's own (rehearsal_net.SYNCER_VM_NAMES)."""
    with world_at(tmp_path / "rehearsal", rehearsal_net.SYNCER_VM_NAMES) as root:
        yield root
