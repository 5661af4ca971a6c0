"""Real sky.Task / sky.Resources objects for islands and the head, built offline and checked field by field; the
SkyPilot island backend over a counting SkyApi double: idempotent starts, cancels by recorded job id, one bounded
queue read for the whole fleet, secrets only in file mounts."""
from __future__ import annotations

import json
import os

import pytest

from sky_double import CountingSky, FakeClock
from yeto.infra.bus import auth as bus_auth
from yeto.services.launcher.backends.base import IslandLaunch, IslandRef
from yeto.services.launcher.backends.sky_tasks import (
    CA_MOUNT,
    CREDS_MOUNT,
    ENV_MOUNT,
    NATS_PORT,
    data_mount,
    head_task,
    island_task,
    job_name,
    setup_script,
)
from yeto.services.launcher.backends.skypilot import SkyPilotBackend, status_of

pytest.importorskip("sky")
pytestmark = pytest.mark.timeout(60)


def launch(tmp_path, generation: int = 2, island: int = 1, **spec) -> IslandLaunch:
    data = tmp_path / "chat.jsonl"
    data.write_text('{"messages": []}\n')
    return IslandLaunch(run_id="r1", island=island, generation=generation, num_islands=3, nats_url="tls://head:4222",
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
    assert task.file_mounts == {"~/.yeto/data/chat.jsonl": lt.recipe["train"]["data"]}
    assert json.loads(task.envs["YETO_RECIPE"])["data"] == "~/.yeto/data/chat.jsonl"


def test_hub_datasets_are_not_mounted_and_store_uris_are():
    assert data_mount("org/chat-traces") == ({}, "org/chat-traces")
    assert data_mount("s3://bucket/chat/") == ({"~/.yeto/data/chat": "s3://bucket/chat/"}, "~/.yeto/data/chat")


def test_on_demand_islands_are_not_spot(tmp_path):
    (res,) = island_task(launch(tmp_path, spot=False)).resources
    assert res.use_spot is False


def test_a_cpu_island_asks_for_vcpus_not_an_accelerator(tmp_path):
    (res,) = island_task(launch(tmp_path, gpu="cpu", count=2, nodes=1)).resources
    assert res.accelerators is None and res.cpus == "4+"


@pytest.mark.parametrize("gpu, index", [("H100", None), ("MI300X", "rocm"), ("cpu", "whl/cpu")])
def test_setup_installs_the_torch_build_for_the_hardware_before_yeto(gpu, index):
    script = setup_script(gpu)
    torch_line = next(line for line in script.splitlines() if "install -q torch" in line)
    assert (index is None and "--index-url" not in torch_line) or (index and index in torch_line)
    assert script.index("torch") < script.index("pip install -q -e")


def test_head_is_a_small_on_demand_vm_running_the_stack_over_its_bundle_with_its_port_open(tmp_path):
    task = head_task("r1", tmp_path / "bundle", cloud="aws", region="us-east-1", memory_gb=32, linger_s=600)
    (res,) = task.resources
    assert res.use_spot is False and res.cpus == "4+" and res.memory == "32+"
    assert str(NATS_PORT) in [str(p) for p in res.ports]
    assert task.run.startswith("yeto --state-dir ~/.yeto/head stack up --head --run-id r1 --port 4222 --foreground")
    assert task.run.endswith("--linger 600")
    assert task.file_mounts == {"~/.yeto/head": str((tmp_path / "bundle").resolve())}


@pytest.mark.parametrize("status, running, code", [
    ("RUNNING", True, None), ("STARTING", True, None), ("SUCCEEDED", False, 0),
    ("RECOVERING", False, None), ("FAILED", False, 1), ("CANCELLED", False, 1),
])
def test_managed_job_statuses_map_to_island_health(status, running, code):
    from sky.jobs import ManagedJobStatus

    got = status_of(ManagedJobStatus[status])
    assert (got.running, got.exit_code) == (running, code)


def head_state(tmp_path, hf_token: str | None = None):
    """A head's state dir as the laptop's bundle makes it: credentials, its certificate in the stack record (its
    nats-server not running here: nothing to reload) and the secret environment."""
    from yeto.infra.nats.tls import self_signed

    state = tmp_path / "head"
    bus_auth.prepare(state)
    cert, _ = self_signed(state / "tls", ["yeto-head"])
    bus_auth.write_secret(state / "stack.json", json.dumps({"url": "tls://127.0.0.1:4222", "ca_file": str(cert),
                                                             "pids": {"nats-server": 1}, "started_at": {}}))
    if hf_token:
        bus_auth.write_secret(state / "secrets" / "env.json", json.dumps({"HF_TOKEN": hf_token}))
    return state, cert


def test_an_island_gets_its_own_credential_the_heads_ca_and_its_secrets_as_files_never_in_envs(tmp_path):
    token = "hf_s3cr3t-token-value"
    state, cert = head_state(tmp_path, hf_token=token)
    sky = CountingSky()
    handle = SkyPilotBackend(state, api=sky, clock=FakeClock()).start(launch(tmp_path, generation=0, nodes=1))
    task = sky.tasks[int(handle)]
    creds = bus_auth.learner_file(state, "r1", "island-1")
    password = json.loads(creds.read_text())["password"]
    assert {k: task.envs[k] for k in ("YETO_NATS_CREDS", "YETO_NATS_CA", "YETO_ENV_FILE")} == {
        "YETO_NATS_CREDS": CREDS_MOUNT, "YETO_NATS_CA": CA_MOUNT, "YETO_ENV_FILE": ENV_MOUNT}
    assert task.file_mounts[CREDS_MOUNT] == str(creds) and task.file_mounts[CA_MOUNT] == str(cert)
    env_copy = task.file_mounts[ENV_MOUNT]
    assert json.loads(open(env_copy).read()) == {"HF_TOKEN": token} and os.stat(env_copy).st_mode & 0o777 == 0o600
    shown = json.dumps(task.envs) + str(task) + json.dumps(task.to_yaml_config()["envs"]) + task.run + task.setup
    assert token not in shown and password not in shown


def test_start_is_idempotent_by_job_name_even_for_a_restarted_launcher(tmp_path):
    sky, clock = CountingSky(), FakeClock()
    first = SkyPilotBackend(api=sky, clock=clock).start(launch(tmp_path))
    assert SkyPilotBackend(api=sky, clock=clock).start(launch(tmp_path)) == first == "100"
    assert sky.calls["jobs_launch"] == 1 and sky.jobs[100].name == "yeto-r1-island-1-g2"


def test_stop_cancels_the_recorded_job_id_and_without_one_the_generations_job(tmp_path):
    sky, clock = CountingSky(), FakeClock()
    backend = SkyPilotBackend(api=sky, clock=clock)
    a = backend.start(launch(tmp_path, island=0))
    b = backend.start(launch(tmp_path, island=1))
    backend.stop("r1", 0, 2, a)
    assert sky.cancelled == [int(a)]
    backend.stop("r1", 1, 2, "")
    assert sky.cancelled == [int(a), int(b)]


def test_a_job_launched_since_the_last_read_is_not_taken_for_gone(tmp_path):
    sky, clock = CountingSky(), FakeClock()
    backend = SkyPilotBackend(api=sky, clock=clock)
    backend.queue()
    clock.t = 5
    handle = backend.start(launch(tmp_path))
    assert backend.statuses([IslandRef("r1", 1, 2, handle)])[0].running
    assert sky.calls["jobs_queue"] == 1


def test_a_failed_queue_read_is_not_retried_sooner_and_a_start_waits_for_a_good_one(tmp_path):
    sky, clock = CountingSky(), FakeClock()
    backend = SkyPilotBackend(api=sky, clock=clock)
    sky.down = True
    for t in range(15):
        clock.t = t
        with pytest.raises(RuntimeError, match="API server unreachable"):
            backend.start(launch(tmp_path))
    assert sky.calls["jobs_queue"] == 1 and sky.calls["jobs_launch"] == 0
    sky.down, clock.t = False, 15
    assert backend.start(launch(tmp_path)) == "100"
