"""How the rehearsal executes one `sky.Task` in a namespace, and its record shared between processes.

The record (`state.json` under $YETO_REHEARSAL_DIR, read and written under a file lock) holds the world, every
cluster and job (id, name, status, pid, process group, namespace) and every `jobs_cancel` call: the laptop's CLI
launches the head, the head's launcher (another process, in another namespace) the islands, the test reads both.

A task runs as SkyPilot would run it on a fresh VM: HOME is a new folder holding only the task's file mounts
(targets must be `~/...`: an absolute one is refused, no VM of ours would have it), the workdir is at
`~/sky_workdir` (a link) and is the working directory, the environment is the task's `envs` plus PATH (this
venv's bin first: the venv stands for what `setup` would pip-install from the internet, so setup is only checked
with `bash -n`), HOME, SkyPilot's own SKYPILOT_* variables, and the rehearsal's own: $YETO_SKY_API and
$YETO_REHEARSAL_DIR (so the head's launcher starts islands through the rehearsal too) and the world's `env`
(rehearsal_world.ENV: settings of the processes it runs, such as how often a head reads the job queue).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import rehearsal_net as net

REHEARSAL_DIR_ENV = "YETO_REHEARSAL_DIR"
SKY_API = "tests.cloud.rehearsal:RehearsalSky"
REPO = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def rehearsal_dir() -> Path:
    where = os.environ.get(REHEARSAL_DIR_ENV)
    if not where:
        raise RuntimeError(f"${REHEARSAL_DIR_ENV} is not set: the rehearsal's fixture sets it (tests/cloud/conftest.py)")
    return Path(where)


@contextlib.contextmanager
def locked(root: Path):
    """The shared record, for reading and changing under an exclusive lock; written back when the block ends."""
    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = root / "state.json"
        state = json.loads(path.read_text()) if path.exists() else {}
        yield state
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(path)


def ship(task, home: Path) -> None:
    """The task's file mounts into the fresh HOME, and its workdir at ~/sky_workdir."""
    for target, source in (task.file_mounts or {}).items():
        if not target.startswith("~/"):
            raise ValueError(f"file mount target {target!r}: not under ~/ (a VM's HOME is all a task may assume)")
        if "://" in str(source):
            raise ValueError(f"file mount {target} <- {source}: the rehearsal ships local files only")
        dest = home / target[2:]
        dest.parent.mkdir(parents=True, exist_ok=True)
        if Path(source).is_dir():
            shutil.copytree(source, dest)
        else:
            shutil.copy2(source, dest)
    if getattr(task, "storage_mounts", None):
        raise ValueError("storage mounts (buckets) are not rehearsed")
    (home / "sky_workdir").symlink_to(Path(task.workdir).resolve() if task.workdir else home, target_is_directory=True)


def environment(task, home: Path, world: dict, ip: str, job_id: int, rank: int = 0,
                node_ips: list[str] | None = None) -> dict[str, str]:
    """A task's environment on its node `rank` of a cluster whose nodes have `node_ips` (one node: [ip])."""
    venv_bin = world["venv_bin"]
    node_ips = node_ips or [ip]
    assert int(task.num_nodes or 1) == len(node_ips), "one address per node"
    shipped = {**(task.envs or {}), **(getattr(task, "secrets", None) or {})}   # secrets: SkyPilot's newer releases
    return {**{k: str(v) for k, v in shipped.items()},
            "PATH": f"{venv_bin}:{SYSTEM_PATH}", "HOME": str(home),
            "SKYPILOT_NUM_NODES": str(len(node_ips)), "SKYPILOT_NODE_RANK": str(rank),
            "SKYPILOT_NODE_IPS": "\n".join(node_ips),
            "SKYPILOT_TASK_ID": f"rehearsal-{world['tag']}-{job_id}", "SKYPILOT_NUM_GPUS_PER_NODE": "0",
            "YETO_SKY_API": SKY_API, REHEARSAL_DIR_ENV: str(rehearsal_dir()), **world.get("env", {})}


def execute(task, folder: Path, world: dict, ns: str, ip: str, job_id: int, hide: list[str] = (), rank: int = 0,
            node_ips: list[str] | None = None) -> dict:
    """Ship, check setup, start run in the namespace (its own process group); the record's process fields. `rank`,
    `node_ips`: this node's index and every node's address, for a task of several nodes (SkyPilot's variables).
    A setup that is not valid bash ends the job as FAILED_SETUP without running anything. Folders in `hide` (the
    laptop's) are empty for the job: it reads only what shipped (a mount namespace of its own, no way back)."""
    home = folder / "home"
    home.mkdir(parents=True)
    ship(task, home)
    if world.get("sky_catalogs"):   # what SkyPilot on a VM would download: its catalog (the rehearsal has no internet)
        shutil.copytree(world["sky_catalogs"], home / ".sky" / "catalogs", dirs_exist_ok=True)
    (folder / "setup.sh").write_text(task.setup or "")
    (folder / "run.sh").write_text(task.run or "")
    checked = subprocess.run(["bash", "-n", str(folder / "setup.sh")], capture_output=True, text=True)
    if checked.returncode != 0:
        (folder / "run.log").write_text(f"setup is not valid bash:\n{checked.stderr}")
        return {"status": "FAILED_SETUP", "pid": None, "started": None}
    wrapper = 'bash "$1" > "$2" 2>&1; echo $? > "$3.tmp"; mv "$3.tmp" "$3"'   # the exit code outlives the launcher
    hiding = 'for p in "${@:4}"; do mount -t tmpfs -o size=64k hidden "$p" || exit 97; done; ' if hide else ""
    argv = [*net.enter(ns), *(["unshare", "--mount", "--propagation", "slave"] if hide else []), "bash", "-c", hiding + wrapper,
            "job", *(str(folder / f) for f in ("run.sh", "run.log", "exit")), *hide]
    quiet = subprocess.DEVNULL
    env = environment(task, home, world, ip, job_id, rank, node_ips)
    proc = subprocess.Popen(argv, env=env, cwd=home / "sky_workdir", stdin=quiet,
                            stdout=quiet, stderr=quiet, start_new_session=True)
    threading.Thread(target=proc.wait, daemon=True).start()    # reaped here, never a zombie in our table
    from yeto.infra import procs
    return {"status": "RUNNING", "pid": proc.pid, "pgid": proc.pid, "started": procs.started_at(proc.pid)}


def status(rec: dict) -> str:
    """RUNNING while its process lives; then SUCCEEDED or FAILED from the exit code it left (none: killed);
    CANCELLED, FAILED_SETUP stay."""
    if rec["status"] != "RUNNING":
        return rec["status"]
    from yeto.infra import procs
    exit_file = Path(rec["dir"]) / "exit"
    # Alive first, the exit file after: the wrapper writes the file before it ends, so a process found gone has left
    # its code by then (read the other way round, a job ending between the two reads was reported FAILED).
    alive = procs.alive(rec["pid"], rec["started"])
    if exit_file.exists():
        return "SUCCEEDED" if exit_file.read_text().strip() == "0" else "FAILED"
    return "RUNNING" if alive else "FAILED"


def venv_bin() -> str:
    return str(Path(sys.executable).parent)
