"""Real sky.Task / sky.Resources objects for islands and the head, built offline and checked field by field."""
from __future__ import annotations

import json

import pytest

from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.skypilot import (
    NATS_PORT,
    data_mount,
    head_task,
    island_task,
    job_name,
    setup_script,
    status_of,
)

pytest.importorskip("sky")


def launch(tmp_path, **spec) -> IslandLaunch:
    data = tmp_path / "chat.jsonl"
    data.write_text('{"messages": []}\n')
    return IslandLaunch(run_id="r1", island=1, generation=2, num_islands=3, nats_url="tls://head:4222",
                        spec={"cloud": "aws", "gpu": "A100", "count": 8, "nodes": 2, "region": "us-east-2", "spot": True, **spec},
                        recipe={"train": {"model": "qwen35-9b", "data": str(data), "max_steps": 100}})


def test_an_island_is_one_spot_managed_job_task_with_its_gpus_region_and_nodes(tmp_path):
    task = island_task(launch(tmp_path))
    (res,) = task.resources
    assert str(res.cloud) == "AWS" and res.accelerators == {"A100": 8} and res.use_spot and res.region == "us-east-2"
    assert task.num_nodes == 2 and task.name == job_name("r1", 1, 2) == "yeto-r1-island-1-g2"
    assert "torchrun" in task.run and "--nproc-per-node 8" in task.run and "-m yeto.learners.torch" in task.run
    assert "--learner island-1" in task.run and "--generation 2" in task.run and "--num-learners 3" in task.run
    assert task.envs["YETO_NATS_URL"] == "tls://head:4222"


def test_local_data_ships_by_file_mount_and_the_learner_reads_the_mounted_path(tmp_path):
    lt = launch(tmp_path)
    task = island_task(lt)
    source = lt.recipe["train"]["data"]
    assert task.file_mounts == {"/yeto/data/chat.jsonl": source}
    assert json.loads(task.envs["YETO_RECIPE"])["data"] == "/yeto/data/chat.jsonl"


def test_hub_datasets_are_not_mounted_and_store_uris_are():
    assert data_mount("org/chat-traces") == ({}, "org/chat-traces")
    assert data_mount("s3://bucket/chat/") == ({"/yeto/data/chat": "s3://bucket/chat/"}, "/yeto/data/chat")


def test_on_demand_islands_are_not_spot(tmp_path):
    (res,) = island_task(launch(tmp_path, spot=False)).resources
    assert res.use_spot is False


@pytest.mark.parametrize("gpu, index", [("H100", None), ("MI300X", "rocm"), ("cpu", "whl/cpu")])
def test_setup_installs_the_torch_build_for_the_hardware_before_yeto(gpu, index):
    script = setup_script(gpu)
    torch_line = next(line for line in script.splitlines() if "install -q torch" in line)
    assert (index is None and "--index-url" not in torch_line) or (index and index in torch_line)
    assert script.index("torch") < script.index("pip install -q -e")


def test_head_is_a_small_on_demand_vm_running_the_stack_with_its_port_open():
    task = head_task("r1", cloud="aws", region="us-east-1")
    (res,) = task.resources
    assert res.use_spot is False and res.cpus == "4+" and res.memory == "16+"
    assert str(NATS_PORT) in [str(p) for p in res.ports]
    assert "yeto stack up --head" in task.run and "--run-id r1" in task.run


@pytest.mark.parametrize("status, running, code", [
    ("RUNNING", True, None), ("STARTING", True, None), ("SUCCEEDED", False, 0),
    ("RECOVERING", False, None), ("FAILED", False, 1), ("CANCELLED", False, 1),
])
def test_managed_job_statuses_map_to_island_health(status, running, code):
    from sky.jobs import ManagedJobStatus

    got = status_of(ManagedJobStatus[status])
    assert (got.running, got.exit_code) == (running, code)
