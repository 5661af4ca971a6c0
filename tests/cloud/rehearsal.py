"""SkyApi rehearsed on this machine: the very `sky.Task` objects Yeto builds, each run in a fresh network namespace.

No cloud is reachable here, so everything after provisioning is rehearsed: `launch_cluster` runs the head's task
in its namespace and `cluster_address` is its veth address (a cluster launched again: the same one, or a new one in
a world with `new_addresses`; a task of N nodes runs in N namespaces, `cluster_addresses` lists
them); `jobs_launch` runs an island's task in a namespace of
its own; `jobs_cancel` records the call and kills the job's processes. How a task is executed (HOME, env, setup
checked but not run): rehearsal_jobs.py; the network: rehearsal_net.py. Processes pick it with $YETO_SKY_API=
tests.cloud.rehearsal:RehearsalSky and share its record through $YETO_REHEARSAL_DIR (rehearsal_world.py makes the
world for the fixtures, and removes all of it). A head whose process has exited is torn down at the next call
(SkyPilot's autodown, without the idle minutes). A region in the world's `refuse_regions` refuses every job asked
of it there, as a cloud out of capacity does (`refused` records each).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))     # imported as tests.cloud.rehearsal by the processes it runs
import rehearsal_jobs as jobs
import rehearsal_net as net
from yeto.services.launcher.backends.sky_api import ManagedJob


class RehearsalSky:
    """SkyApi over the shared record in $YETO_REHEARSAL_DIR."""

    def __init__(self) -> None:
        self.root = jobs.rehearsal_dir()

    def _start(self, state: dict, task: Any, what: str, hide: list[str] = (), index: int | None = None) -> dict:
        """A task in a namespace of its own; a task of N nodes in N namespaces (`what`-node-K, each running the task
        with its rank and every node's address, as SkyPilot runs a multi-node task), the first node's record with
        every node's under "nodes"."""
        num_nodes = int(getattr(task, "num_nodes", 1) or 1)
        if index is None or num_nodes > 1:
            index = state["next_index"]
            state["next_index"] = index + num_nodes
        names = [what] if num_nodes == 1 else [f"{what}-node-{k}" for k in range(num_nodes)]
        made: list[dict] = []
        try:
            for k, name in enumerate(names):
                ns, ip = net.ns_up(state["world"], name, index + k)
                made.append({"ns": ns, "ip": ip, "index": index + k, "dir": str(self.root / name)})
            ips = [m["ip"] for m in made]
            nodes = [{**m, **jobs.execute(task, Path(m["dir"]), state["world"], m["ns"], m["ip"], m["index"], hide,
                                          rank=k, node_ips=ips)} for k, m in enumerate(made)]
            return {**nodes[0], "nodes": nodes} if num_nodes > 1 else nodes[0]
        except Exception:       # nothing of a refused task stays: a later job may take its id
            for m in made:
                net.ns_down(state["world"], m["ns"], m["index"])
                shutil.rmtree(m["dir"], ignore_errors=True)
            raise

    def _down(self, state: dict, rec: dict) -> None:
        nodes = rec.get("nodes", [rec])
        net.kill_all(*(node["ns"] for node in nodes))      # every node's processes at once, then the namespaces
        for node in nodes:
            net.ns_down(state["world"], node["ns"], node["index"])
        rec["cluster_status"] = "DOWN"

    def _autodown(self, state: dict) -> None:
        for rec in state["clusters"].values():
            if rec["cluster_status"] == "UP" and all(jobs.status(n) != "RUNNING" for n in rec.get("nodes", [rec])):
                self._down(state, rec)

    def launch_cluster(self, task: Any, cluster: str, *, idle_minutes_to_autodown: int) -> None:
        with jobs.locked(self.root) as state:
            self._autodown(state)
            if state["clusters"].get(cluster, {}).get("cluster_status") == "UP":
                raise RuntimeError(f"cluster {cluster} is up already (the rehearsal runs one task per cluster)")
            # A cluster launched again under its name gets its old address back, as a reserved (static) address would;
            # in a world with `new_addresses` a new one, as SkyPilot gives (a replacement head at another address)
            again = None if state["world"].get("new_addresses") else state["clusters"].get(cluster, {}).get("index")
            rec = self._start(state, task, f"cluster-{cluster}", index=again)
            state["clusters"][cluster] = {**rec, "cluster_status": "UP" if rec["status"] == "RUNNING" else "DOWN",
                                          "idle_minutes_to_autodown": idle_minutes_to_autodown}

    def cluster_address(self, cluster: str) -> str | None:
        with jobs.locked(self.root) as state:
            self._autodown(state)
            rec = state["clusters"].get(cluster)
            return rec["ip"] if rec and rec["cluster_status"] == "UP" else None

    def cluster_addresses(self, cluster: str) -> list[str]:
        with jobs.locked(self.root) as state:
            self._autodown(state)
            rec = state["clusters"].get(cluster)
            return [n["ip"] for n in rec.get("nodes", [rec])] if rec and rec["cluster_status"] == "UP" else []

    def down_cluster(self, cluster: str) -> None:
        with jobs.locked(self.root) as state:
            rec = state["clusters"].get(cluster)
            if rec and rec["cluster_status"] == "UP":
                self._down(state, rec)

    def _refused(self, task: Any, name: str) -> str | None:
        """Why the task's region refuses it (recorded), None when the region has room."""
        region = next(iter(task.resources)).region if task.resources else None
        with jobs.locked(self.root) as state:
            if not region or region not in state["world"].get("refuse_regions", []):
                return None
            state.setdefault("refused", []).append([name, region])
        return (f"sky.exceptions.ResourcesUnavailableError: InsufficientInstanceCapacity: no capacity for {name} in "
                f"{region} (the rehearsal refuses this region)")

    def jobs_launch(self, task: Any, name: str) -> int:
        if why := self._refused(task, name):
            raise RuntimeError(why)
        with jobs.locked(self.root) as state:
            job_id = len(state["jobs"]) + 1
            rec = self._start(state, task, f"job-{job_id}", state["world"].get("hidden", []))
            # envs are what SkyPilot prints for everyone to see: kept, so a test can check no secret is among them
            state["jobs"][str(job_id)] = {**rec, "id": job_id, "name": name, "envs": dict(task.envs or {})}
            return job_id

    def jobs_queue(self) -> list[ManagedJob]:
        with jobs.locked(self.root) as state:
            state.setdefault("queue_calls", []).append([time.time(), os.getpid()])    # who polls how often
            return [ManagedJob(int(i), rec["name"], jobs.status(rec)) for i, rec in state["jobs"].items()]

    def jobs_cancel(self, job_ids: list[int]) -> None:
        with jobs.locked(self.root) as state:
            state["cancels"].append([int(i) for i in job_ids])
            running = [rec for i in job_ids if (rec := state["jobs"].get(str(i))) and jobs.status(rec) == "RUNNING"]
            net.kill_all(*(rec["ns"] for rec in running))         # ended already: nothing to cancel; the rest at once
            for rec in running:
                rec["status"] = "CANCELLED"
                net.ns_down(state["world"], rec["ns"], rec["index"])

    def jobs_logs(self, job_id: int) -> str:
        with jobs.locked(self.root) as state:
            rec = state["jobs"].get(str(job_id))
        log = Path(rec["dir"]) / "run.log" if rec else None
        return log.read_text(errors="replace") if log and log.exists() else ""

    def check(self) -> dict[str, str | None]:
        """The clouds the rehearsal stands in for, all with working credentials."""
        return {"aws": None, "gcp": None}
