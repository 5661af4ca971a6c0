"""Cloud islands through SkyPilot: the head VM task, and one managed job per island (spot by default).

A managed job per island means a preemption touches one island, never the fleet. SkyPilot would recover
a preempted job by itself; Yeto instead sees RECOVERING as a preemption and starts the next generation
as a new job (cancelling the old one), so the tape records every gap and the learner rejoins with a new
generation, exactly as on the local backend. Building the task objects needs no cloud (tests build them).
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from yeto.services.launcher.backends.base import IslandLaunch, IslandStatus, learner_args

REPO = Path(__file__).resolve().parents[3]
NATS_PORT = 4222
# The torch build per accelerator vendor: the wheel index pip installs from (None: PyPI's default, CUDA).
TORCH_INDEX = {"nvidia": None, "amd": "https://download.pytorch.org/whl/rocm6.2", "cpu": "https://download.pytorch.org/whl/cpu"}
AMD_GPUS = ("MI300X", "MI250X")


def vendor(gpu: str) -> str:
    return "amd" if gpu.upper() in AMD_GPUS else "cpu" if gpu.lower() == "cpu" else "nvidia"


def setup_script(gpu: str) -> str:
    """Install the right torch for the island's hardware first, then Yeto from the synced workdir."""
    index = TORCH_INDEX[vendor(gpu)]
    torch = "pip install -q torch" + (f" --index-url {index}" if index else "")
    extras = "launcher,gpu" if vendor(gpu) == "nvidia" else "launcher"
    return "\n".join(["set -e", "python3 -m pip install -q --upgrade pip", f"python3 -m {torch}",
                      f"python3 -m pip install -q -e '.[{extras}]'"])


def is_remote_data(data: str) -> bool:
    """Local files and object-store URIs ship by file mount; a Hugging Face dataset id is read from the Hub."""
    return Path(data).expanduser().exists() or "://" in data


def data_mount(data: str) -> tuple[dict[str, str], str]:
    """({remote path: source}, the path learners read) for --data; no mount for a Hub dataset id."""
    if not data or not is_remote_data(data):
        return {}, data
    source = str(Path(data).expanduser().resolve()) if "://" not in data else data
    target = f"/yeto/data/{Path(data.rstrip('/')).name}"
    return {target: source}, target


CREDS_MOUNT = "/yeto/auth/learner.json"


def island_task(launch: IslandLaunch, creds: Path | None = None):
    """The island's managed job. Its bus credential (`creds`, the island's 0600 file) ships as a file mount
    and is named by path in $YETO_NATS_CREDS: never its contents in `envs`, which SkyPilot prints."""
    import sky

    spec = launch.spec
    mounts, data_path = data_mount(launch.recipe.get("train", {}).get("data", ""))
    train = {**launch.recipe.get("train", {}), "data": data_path}
    count, nodes = int(spec.get("count", 1)), int(spec.get("nodes", 1))
    torchrun = ("torchrun --nnodes $SKYPILOT_NUM_NODES --node-rank $SKYPILOT_NODE_RANK "
                f"--nproc-per-node {count} --master-addr $(echo \"$SKYPILOT_NODE_IPS\" | head -n1) --master-port 29500")
    run = f"{torchrun} -m yeto.learners.torch " + " ".join(
        shlex.quote(a) if a != "$YETO_RECIPE" else '"$YETO_RECIPE"'
        for a in learner_args(launch, "$YETO_RECIPE"))
    task = sky.Task(name=job_name(launch.run_id, launch.island, launch.generation), setup=setup_script(spec["gpu"]),
                    run=run, num_nodes=nodes, workdir=str(REPO),
                    envs={"YETO_RECIPE": json.dumps(train, sort_keys=True), "YETO_NATS_URL": launch.nats_url,
                          "HF_HUB_ENABLE_HF_TRANSFER": "0", **({"YETO_NATS_CREDS": CREDS_MOUNT} if creds else {})})
    task.set_resources(sky.Resources(
        cloud=sky.CLOUD_REGISTRY.from_str(spec["cloud"]), accelerators={spec["gpu"]: count},
        use_spot=bool(spec.get("spot", True)), region=spec.get("region"),
        job_recovery={"strategy": "FAILOVER", "max_restarts_on_errors": 0}))
    if creds:
        mounts = {**mounts, CREDS_MOUNT: str(creds)}
    if mounts:
        task.set_file_mounts(mounts)
    return task


def head_task(run_id: str, *, cloud: str | None = None, region: str | None = None):
    """The small on-demand head VM: `yeto stack up --head` (nats-server with TLS and per-run credentials,
    the services, the tape). Its port is opened for the islands."""
    import sky

    task = sky.Task(name=f"yeto-head-{run_id}", workdir=str(REPO), setup=setup_script("cpu"),
                    run=f"yeto stack up --head --run-id {shlex.quote(run_id)} --port {NATS_PORT} --foreground")
    task.set_resources(sky.Resources(cloud=sky.CLOUD_REGISTRY.from_str(cloud) if cloud else None, region=region,
                                     cpus="4+", memory="16+", use_spot=False, ports=[NATS_PORT]))
    return task


def job_name(run_id: str, island: int, generation: int) -> str:
    return f"yeto-{run_id}-island-{island}-g{generation}"


def status_of(job_status: Any) -> IslandStatus:
    """A managed job's status as the launcher sees it; RECOVERING is a preemption."""
    name = getattr(job_status, "value", str(job_status))
    if name in ("PENDING", "SUBMITTED", "STARTING", "RUNNING"):
        return IslandStatus(True)
    if name == "SUCCEEDED":
        return IslandStatus(False, 0, "the managed job succeeded")
    if name == "RECOVERING":
        return IslandStatus(False, None, "preempted (the managed job is recovering)")
    return IslandStatus(False, 1, f"the managed job ended {name}")


class SkyPilotBackend:
    name = "skypilot"

    def __init__(self, state_dir: Path | None = None):
        self.state_dir = state_dir      # the stack's, where islands' credentials are issued (None: no auth)

    def start(self, launch: IslandLaunch) -> str:
        import sky

        from yeto.infra.bus_auth import issue_learner

        existing = self._find(job_name(launch.run_id, launch.island, launch.generation))
        if existing is not None:
            return str(existing["job_id"])
        creds = issue_learner(self.state_dir, launch.run_id, launch.learner) if self.state_dir else None
        name = job_name(launch.run_id, launch.island, launch.generation)
        job_id, _ = sky.get(sky.jobs.launch(island_task(launch, creds), name=name))
        return str(job_id)

    def status(self, run_id: str, island: int, generation: int, handle: str) -> IslandStatus:
        job = self._find(job_name(run_id, island, generation))
        return IslandStatus(False, None, "the managed job is gone") if job is None else status_of(job["status"])

    def stop(self, run_id: str, island: int, generation: int, handle: str) -> None:
        import sky

        if handle.isdigit():
            sky.get(sky.jobs.cancel(job_ids=[int(handle)]))

    @staticmethod
    def _find(name: str) -> dict | None:
        import sky

        jobs = [j for j in sky.get(sky.jobs.queue(refresh=True)) if j.get("job_name") == name]
        return max(jobs, key=lambda j: j["job_id"]) if jobs else None
