"""Cluster mode rehearsed, the syncer's VM lost: test_cloud_head_cluster.py's run on a head over three VMs (three
network namespaces, prefix `ysyn`, bridge `ysyb`, addresses 10.238.K.x: never another rehearsal's), and mid-run the
VM of the syncer that holds the shard's lease is deleted with everything in it: node 1 (nats-server-1, `syncer`, the
second tape, planner-1, launcher-0) or node 2 (nats-server-2, `syncer-standby`, launcher-1, finalizer-0), whichever
took the lease first; its folder of snapshots goes with the VM's disk. The other syncer takes the lease over once it
lapses (services/syncer/lease.py), restores the newest snapshot from the replicated store
(infra/bus/snapshot_store.py) and merges on; both islands merge after the kill, the run finalizes, the tape left is the
replicated stream; node 0, which ran neither syncer, starts a new standby for the shard (infra/stack/standby.py).
Printed: the time to the first merged global after the kill (target <= 10 s), the phases after the kill (each Raft
group's new leader, the lease seen lapsed and taken, the consumer handed over, the first pushes, the round:
takeover_phases.py), the events the stream held, and over the run, the pushes delivered again while their holder held
them and its keep-alives held up (the risks of the kept consumer's short ack wait: services/syncer/takeover.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import rehearsal_net
import rehearsal_world
import takeover_phases
from test_cloud_head_cluster import RUN, laptop_in, rehearse
from test_cloud_rehearsal import Laptop

pytestmark = pytest.mark.slow
NAMES = rehearsal_net.SYNCER_VM_NAMES


@pytest.fixture
def laptop(syncer_vm_rehearsal_dir, tmp_path) -> Laptop:
    # the world from tests/cloud/conftest.py's fixture: `from conftest import ...` names whichever conftest a pytest
    # worker imported first (tests/security's in the full run), not this folder's
    return laptop_in(syncer_vm_rehearsal_dir, tmp_path)


@pytest.mark.timeout(1500)
def test_a_head_over_three_vms_loses_the_syncers_vm_and_its_standby_merges_on_and_the_run_finalizes(laptop: Laptop):
    rehearse(laptop, None, NAMES["ns"])
    head = json.loads((laptop.home / "heads" / RUN / "head.json").read_text())
    cluster = rehearsal_world.record(laptop.world)["clusters"][head["cluster"]]
    print(takeover_phases.held_report([d for n in cluster["nodes"] if (d := Path(n["dir"])).exists()]))


def test_names_are_this_rehearsals_own():
    taken = [rehearsal_net.NAMES, rehearsal_net.HEAD_CLUSTER_NAMES]
    assert all(NAMES[k] != t[k] for t in taken for k in NAMES)
