"""What SkyPilot runs: the head VM's task and one managed-job task per island (building them needs no cloud).

Secrets never go in a task's `envs` (SkyPilot prints them): the island's bus credential, the head's certificate
and the user's secret environment (HF_TOKEN, --env-from-host) ship as file mounts under ~/.yeto/island/, and
`envs` only name their paths. The learner expands `~` in those paths and loads $YETO_ENV_FILE itself.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from yeto.infra.head.data import local_model
from yeto.infra.head.records import HEAD_STATE
from yeto.infra.head.rendezvous import place
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.services.launcher.backends.base import IslandLaunch, learner_args

REPO = Path(__file__).resolve().parents[3]
NATS_PORT = 4222
# The torch build per accelerator vendor: the wheel index pip installs from (None: PyPI's default, CUDA).
TORCH_INDEX = {"nvidia": None, "amd": "https://download.pytorch.org/whl/rocm6.2", "cpu": "https://download.pytorch.org/whl/cpu"}
AMD_GPUS = ("MI300X", "MI250X")
ISLAND_DIR = "~/.yeto/island"
CREDS_MOUNT, CA_MOUNT, ENV_MOUNT = f"{ISLAND_DIR}/learner.json", f"{ISLAND_DIR}/ca.pem", f"{ISLAND_DIR}/env.json"
DATA_DIR, MODEL_DIR = "~/.yeto/data", "~/.yeto/model"
# The fsspec package the head's finalizer needs to upload to an --output store (r2 and cos speak S3; hf:// uses
# huggingface_hub, which Yeto installs anyway; a path on the head needs nothing).
STORE_PACKAGES = {"s3": "s3fs", "r2": "s3fs", "cos": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
                  "oci": "ocifs"}


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
    target = f"{DATA_DIR}/{Path(data.rstrip('/')).name}"
    return {target: source}, target


def model_mount(model: str) -> tuple[dict[str, str], str]:
    """({remote path: source}, the name learners load) for --model: a local folder or .gguf file (on the head, the
    copy the laptop shipped) goes to ~/.yeto/model/<name>; an alias or a Hub id stays (each island resolves it)."""
    source = local_model(model)
    if source is None:
        return {}, model
    target = f"{MODEL_DIR}/{source.resolve().name}"
    return {target: str(source.resolve())}, target


def island_resources(spec: dict[str, Any]):
    """The island's machines: its GPUs (spot unless asked otherwise), or for a CPU island two vCPUs per rank."""
    import sky

    count = int(spec.get("count", 1))
    gpus = None if vendor(spec["gpu"]) == "cpu" else {spec["gpu"]: count}
    return sky.Resources(cloud=sky.CLOUD_REGISTRY.from_str(spec["cloud"]), accelerators=gpus,
                         cpus=f"{2 * count}+" if gpus is None else None, use_spot=bool(spec.get("spot", True)),
                         region=spec.get("region"), job_recovery={"strategy": "FAILOVER", "max_restarts_on_errors": 0})


def island_task(launch: IslandLaunch, creds: Path | None = None, *, ca: Path | None = None,
                env_file: Path | None = None):
    """The island's managed job. `creds` (its own 0600 bus credential), `ca` (the head's certificate) and
    `env_file` (its 0600 secret environment) ship as file mounts; `envs` hold their paths, never their contents."""
    import sky

    spec, output = launch.spec, LaunchRecipe.upcast(launch.recipe).output
    train = LaunchRecipe.upcast(launch.recipe).learner_recipe()
    # the head's rendezvous is beside the mirror: follow it (a head over several VMs has none: it is given every node)
    mirrored = output and not output.startswith("hf://") and "," not in LaunchRecipe.upcast(launch.recipe).bus_url
    contract = learner_args(launch, "$YETO_RECIPE").but(head_rendezvous=place(output, launch.run_id) if mirrored else None)
    mounts, data_path = data_mount(train["data"])
    model_files, model_path = model_mount(train["model"])
    mounts, train = {**mounts, **model_files}, {**train, "data": data_path, "model": model_path}
    count, nodes = int(spec.get("count", 1)), int(spec.get("nodes", 1))
    # One rank on one node: the learner itself, its rank and world the contract's defaults (0 of 1). torchrun's agent
    # in front of it was one more interpreter importing torch and a rendezvous store before the learner started (its
    # start 3.8 s later in the cloud rehearsal, 2 loaded cores, 2026-12-06), for a process group of one.
    starter = "python3" if count == 1 and nodes == 1 else (
        "torchrun --nnodes $SKYPILOT_NUM_NODES --node-rank $SKYPILOT_NODE_RANK "
        f"--nproc-per-node {count} --master-addr $(echo \"$SKYPILOT_NODE_IPS\" | head -n1) --master-port 29500")
    run = f"{starter} -m {LaunchRecipe.upcast(launch.recipe).learner_module} " + " ".join(
        shlex.quote(a) if a != "$YETO_RECIPE" else '"$YETO_RECIPE"'
        for a in contract.to_argv())
    files = {name: (target, str(path)) for name, target, path in (
        ("YETO_NATS_CREDS", CREDS_MOUNT, creds), ("YETO_NATS_CA", CA_MOUNT, ca), ("YETO_ENV_FILE", ENV_MOUNT, env_file))
        if path is not None}
    envs = {"YETO_RECIPE": json.dumps(train, sort_keys=True), "YETO_NATS_URL": launch.nats_url,
            "HF_HUB_ENABLE_HF_TRANSFER": "0", **{name: target for name, (target, _) in files.items()}}
    task = sky.Task(name=job_name(launch.run_id, launch.island, launch.generation), setup=island_setup(spec["gpu"], output),
                    run=run, num_nodes=nodes, workdir=str(REPO), envs=envs)
    task.set_resources(island_resources(spec))
    mounts = {**mounts, **dict(files.values())}
    if mounts:
        task.set_file_mounts(mounts)
    return task


def island_setup(gpu: str, output: str = "") -> str:
    """An island's setup, the head's too (gpu "cpu"): torch and Yeto, then the package of the `output` store (the head
    uploads the artifact with it; an island's learner reads the head's rendezvous with it)."""
    package = STORE_PACKAGES.get(output.split("://", 1)[0]) if "://" in output else None
    return setup_script(gpu) + (f"\npython3 -m pip install -q {package}" if package else "")


def head_setup(output: str = "") -> str:
    """The head's setup: torch for CPU and Yeto, then the store package its finalizer uploads `output` with."""
    return island_setup("cpu", output)


def head_task(run_id: str, bundle_dir: str | Path, *, cloud: str | None = None, region: str | None = None,
              cpus: str = "4+", memory_gb: int = 16, linger_s: int = 3600, output: str = "", syncers: int = 1,
              nodes: int = 1):
    """The run's on-demand head VM: `yeto stack up --head` (nats-server with TLS and per-run credentials, the
    services, the tape) over the bundle the laptop made (shipped as the head's state dir); its port is open
    for the islands. It outlives the run by at most `linger_s` waiting for the laptop to copy the tape back.
    `nodes` > 1: a head over that many VMs, one task per node (SkyPilot runs it on each with its rank and every
    node's address), each node of the NATS cluster with its share of the services (docs/CLUSTER.md)."""
    import sky

    run = (f"yeto --state-dir {HEAD_STATE} stack up --head --run-id {shlex.quote(run_id)} --port {NATS_PORT} "
           f"--foreground --linger {int(linger_s)}" + (f" --syncers {int(syncers)}" if syncers > 1 else "")
           + (f' --cluster {int(nodes)} --node "$SKYPILOT_NODE_RANK" --peers "$SKYPILOT_NODE_IPS"' if nodes > 1 else ""))
    task = sky.Task(name=f"yeto-head-{run_id}", workdir=str(REPO), setup=head_setup(output), run=run, num_nodes=nodes)
    task.set_resources(sky.Resources(cloud=sky.CLOUD_REGISTRY.from_str(cloud) if cloud else None, region=region,
                                     cpus=cpus, memory=f"{int(memory_gb)}+", use_spot=False, ports=[NATS_PORT]))
    task.set_file_mounts({HEAD_STATE: str(Path(bundle_dir).expanduser().resolve())})
    return task


def job_name(run_id: str, island: int, generation: int) -> str:
    return f"yeto-{run_id}-island-{island}-g{generation}"
