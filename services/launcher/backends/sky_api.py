"""The few SkyPilot calls Yeto makes, behind one protocol: the head's cluster, the islands' managed jobs, `sky check`.

`RealSky` calls SkyPilot's SDK. Everything above it (the island backend, the head's lifecycle, `yeto check`) only
sees `SkyApi`, so the rehearsal (tests/cloud/rehearsal.py) can execute the very `sky.Task` objects Yeto builds in
network namespaces of this machine instead of renting VMs. `$YETO_SKY_API` names another implementation as
`module:attribute` (a class or factory taking no argument); unset, it is SkyPilot.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Protocol

SKY_API_ENV = "YETO_SKY_API"


@dataclass(frozen=True)
class ManagedJob:
    """One row of the managed-jobs queue."""

    job_id: int
    name: str
    status: str
    """SkyPilot's ManagedJobStatus name: PENDING, STARTING, RUNNING, RECOVERING, SUCCEEDED, FAILED, CANCELLED, ..."""


class SkyApi(Protocol):
    def launch_cluster(self, task: Any, cluster: str, *, idle_minutes_to_autodown: int) -> None:
        """Provision (or reuse) `cluster` and run `task` on it; it tears itself down after that many idle minutes."""

    def cluster_address(self, cluster: str) -> str | None:
        """The cluster head's address reachable from this machine (public IP or name); None when not up."""

    def cluster_addresses(self, cluster: str) -> list[str]:
        """Every node's address reachable from this machine, head node first ([] when not up): a head of several VMs."""

    def down_cluster(self, cluster: str) -> None:
        """Terminate the cluster; nothing if it is gone."""

    def jobs_launch(self, task: Any, name: str) -> int:
        """Submit a managed job; its job id."""

    def jobs_queue(self) -> list[ManagedJob]:
        """Every managed job of this user (one call for the whole fleet)."""

    def jobs_cancel(self, job_ids: list[int]) -> None:
        """Cancel these managed jobs; ids already ended are ignored."""

    def jobs_logs(self, job_id: int) -> str:
        """The job's output so far (set-up failures happen before a learner can publish a line)."""

    def check(self) -> dict[str, str | None]:
        """Cloud name -> None when its credentials work, else why not (SkyPilot's own `sky check`)."""


class RealSky:
    """SkyPilot's SDK (each call goes through SkyPilot's API server, which it starts locally on first use)."""

    def launch_cluster(self, task: Any, cluster: str, *, idle_minutes_to_autodown: int) -> None:
        import sky

        sky.stream_and_get(sky.launch(task, cluster_name=cluster, idle_minutes_to_autostop=idle_minutes_to_autodown,
                                      down=True, retry_until_up=False))

    def cluster_address(self, cluster: str) -> str | None:
        import sky

        records = sky.get(sky.status(cluster_names=[cluster]))
        if not records:
            return None
        handle = records[0].get("handle")
        return getattr(handle, "head_ip", None) if handle is not None else None

    def cluster_addresses(self, cluster: str) -> list[str]:
        import sky

        records = sky.get(sky.status(cluster_names=[cluster]))
        handle = records[0].get("handle") if records else None
        return [external for _, external in (getattr(handle, "stable_internal_external_ips", None) or [])]

    def down_cluster(self, cluster: str) -> None:
        import sky
        from sky import exceptions

        try:
            sky.get(sky.down(cluster))
        except exceptions.ClusterDoesNotExist:
            return

    def jobs_launch(self, task: Any, name: str) -> int:
        import sky

        job_id, _ = sky.get(sky.jobs.launch(task, name=name))
        return int(job_id)

    def jobs_queue(self) -> list[ManagedJob]:
        import sky

        rows = sky.get(sky.jobs.queue(refresh=True, skip_finished=False))
        return [ManagedJob(int(r["job_id"]), str(r.get("job_name") or ""), getattr(r["status"], "value", str(r["status"])))
                for r in rows]

    def jobs_cancel(self, job_ids: list[int]) -> None:
        import sky

        if job_ids:
            sky.get(sky.jobs.cancel(job_ids=job_ids))

    def jobs_logs(self, job_id: int) -> str:
        import io

        import sky

        out = io.StringIO()
        sky.jobs.tail_logs(job_id=job_id, follow=False, output_stream=out)
        return out.getvalue()

    def check(self) -> dict[str, str | None]:
        """SkyPilot's own check, in this process when its API server is local (sky_check.py says why)."""
        from yeto.services.launcher.backends.sky_check import check_clouds

        return check_clouds()

    def api_server_problem(self) -> str | None:
        """Why SkyPilot's API server, which every launch goes through, cannot answer; None when it can."""
        from yeto.services.launcher.backends.sky_check import api_server_problem

        return api_server_problem()

def sky_api() -> SkyApi:
    """The implementation $YETO_SKY_API names (`module:attribute`), else SkyPilot's."""
    target = os.environ.get(SKY_API_ENV, "").strip()
    if not target:
        return RealSky()
    module, _, attr = target.partition(":")
    if not attr:
        raise ValueError(f"${SKY_API_ENV}={target!r}: expected module:attribute")
    return getattr(importlib.import_module(module), attr)()
