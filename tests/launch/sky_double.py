"""A SkyApi test double (behind the protocol of services/launcher/backends/sky_api.py): managed jobs in memory, every
call counted, the tasks it was given kept as they came. The island backend's tests drive it with a fake clock.
The real SkyPilot objects are checked elsewhere: test_launch_sky_optimizer.py runs SkyPilot's own optimizer on
every task the launcher builds, and the rehearsal (tests/cloud) executes them."""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from yeto.services.launcher.backends.sky_api import ManagedJob


class FakeClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class CountingSky:
    def __init__(self, first_job_id: int = 100):
        self.jobs: dict[int, ManagedJob] = {}
        self.tasks: dict[int, Any] = {}
        self.calls: Counter[str] = Counter()
        self.cancelled: list[int] = []
        self.next_id = first_job_id
        self.down = False
        """True: the queue read fails (SkyPilot's API server unreachable)."""

    def set_status(self, job_id: int, status: str) -> None:
        self.jobs[job_id] = replace(self.jobs[job_id], status=status)

    def jobs_launch(self, task: Any, name: str) -> int:
        self.calls["jobs_launch"] += 1
        job_id, self.next_id = self.next_id, self.next_id + 1
        self.jobs[job_id], self.tasks[job_id] = ManagedJob(job_id, name, "RUNNING"), task
        return job_id

    def jobs_queue(self) -> list[ManagedJob]:
        self.calls["jobs_queue"] += 1
        if self.down:
            raise ConnectionError("SkyPilot API server unreachable")
        return list(self.jobs.values())

    def jobs_cancel(self, job_ids: list[int]) -> None:
        self.calls["jobs_cancel"] += 1
        self.cancelled += job_ids
        for job_id in job_ids:
            if job_id in self.jobs:
                self.set_status(job_id, "CANCELLED")

    def jobs_logs(self, job_id: int) -> str:
        raise NotImplementedError("the island backend never reads logs")

    def launch_cluster(self, task: Any, cluster: str, *, idle_minutes_to_autodown: int) -> None:
        raise NotImplementedError("the island backend never launches a cluster")

    def cluster_address(self, cluster: str) -> str | None:
        raise NotImplementedError("the island backend never asks for a cluster")

    def down_cluster(self, cluster: str) -> None:
        raise NotImplementedError("the island backend never downs a cluster")

    def check(self) -> dict[str, str | None]:
        raise NotImplementedError("the island backend never checks credentials")
