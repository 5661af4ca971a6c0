"""Cloud islands through SkyPilot: one managed job per island (spot by default), through `sky_api()`.

A managed job per island means a preemption touches one island, never the fleet. SkyPilot would recover
a preempted job by itself; Yeto instead sees RECOVERING as a preemption and starts the next generation
as a new job (the launcher cancels the old one), so the tape records every gap and the learner rejoins with a
new generation, exactly as on the local backend. A job's handle is its managed job id: stopping an island
cancels that id. The whole fleet's status comes from one `jobs_queue()` read, made at most every
`max_age_s` (15 s; $YETO_SKY_QUEUE_S, read when the launcher starts, docs/CONFIG.md) however many islands and launcher
threads ask: learners' heartbeats over NATS are the fast signal, this one only has to be sure. The task builders live
in sky_tasks.py (the head's too).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from yeto.infra.bus import auth as bus_auth
from yeto.infra.run_paths import run_path
from yeto.infra.settings import seconds_from_env
from yeto.infra.stack import StackPaths, read_record
from yeto.services.launcher.backends.base import IslandLaunch, IslandRef, IslandStatus
from yeto.services.launcher.backends.sky_api import ManagedJob, SkyApi, sky_api
from yeto.services.launcher.backends.sky_tasks import CREDS_MOUNT, head_task, island_task, job_name

__all__ = ["CREDS_MOUNT", "QUEUE_ENV", "QUEUE_MAX_AGE_S", "SkyPilotBackend", "head_task", "island_task", "job_name",
           "queue_max_age_s", "status_of"]
QUEUE_MAX_AGE_S = 15.0
QUEUE_ENV = "YETO_SKY_QUEUE_S"
log = logging.getLogger(__name__)
RUNNING = ("PENDING", "SUBMITTED", "STARTING", "RUNNING")


def status_of(job_status: object) -> IslandStatus:
    """A managed job's status as the launcher sees it; RECOVERING is a preemption."""
    name = str(getattr(job_status, "value", job_status))
    if name in RUNNING:
        return IslandStatus(True)
    if name == "SUCCEEDED":
        return IslandStatus(False, 0, "the managed job succeeded")
    if name == "RECOVERING":
        return IslandStatus(False, None, "preempted (the managed job is recovering)")
    return IslandStatus(False, 1, f"the managed job ended {name}")


def queue_max_age_s() -> float:
    """How old the queue read may get ($YETO_SKY_QUEUE_S, default QUEUE_MAX_AGE_S 15 s): each read is a call through
    SkyPilot's API server, so a head never needs it sooner; the cloud rehearsal (tests/cloud) lowers it, its islands
    ending on this machine the moment their process does."""
    return seconds_from_env(QUEUE_ENV, QUEUE_MAX_AGE_S, log)


class SkyPilotBackend:
    name = "skypilot"

    def __init__(self, state_dir: Path | None = None, *, api: SkyApi | None = None,
                 clock: Callable[[], float] = time.monotonic, max_age_s: float | None = None):
        self.state_dir = state_dir      # the stack's: islands' credentials are issued there (None: no auth)
        self.api, self.clock = api or sky_api(), clock
        self.max_age_s = queue_max_age_s() if max_age_s is None else max_age_s
        self._lock = threading.Lock()   # the launcher's worker threads share one queue read
        self._jobs: dict[int, ManagedJob] = {}
        self._read_at: float | None = None
        self._error: Exception | None = None

    def queue(self, fresh: bool = False) -> dict[int, ManagedJob]:
        """The last queue read (plus the jobs launched since), read again once older than max_age_s, or now when
        `fresh`. A failed read is not retried sooner either: its error is raised again until then."""
        with self._lock:
            now = self.clock()
            if self._read_at is None or now - self._read_at >= self.max_age_s or (fresh and self._error is None):
                self._read_at = now
                try:
                    self._jobs, self._error = {j.job_id: j for j in self.api.jobs_queue()}, None
                except Exception as e:  # noqa: BLE001 - whatever SkyPilot raised: kept, and raised to each caller
                    self._error = e
            if self._error is not None:
                raise RuntimeError(f"reading SkyPilot's managed jobs: {self._error}") from self._error
            return dict(self._jobs)

    def _named(self, name: str) -> ManagedJob | None:
        jobs = [j for j in self.queue().values() if j.name == name]
        return max(jobs, key=lambda j: j.job_id) if jobs else None

    def start(self, launch: IslandLaunch) -> str:
        name = job_name(launch.run_id, launch.island, launch.generation)
        existing = self._named(name)     # a redelivered StartIsland: the job submitted before is the one
        if existing is not None:
            return str(existing.job_id)
        job_id = self.api.jobs_launch(island_task(launch, **self._files(launch)), name)
        with self._lock:    # known before the next read lists it, so a poll in between does not call it gone
            self._jobs[job_id] = ManagedJob(job_id, name, "PENDING")
        return str(job_id)

    def _files(self, launch: IslandLaunch) -> dict[str, Path | None]:
        """The island's own credential, the head's certificate (the stack record's), and a 0600 copy of the
        secret environment the laptop shipped to the head (<state>/secrets/env.json), when there is one."""
        if self.state_dir is None:
            return {}
        state = Path(self.state_dir)
        ca = (read_record(StackPaths(state)) or {}).get("ca_file")
        env_file, secrets = None, state / "secrets" / "env.json"
        if secrets.exists():
            env_file = bus_auth.write_secret(run_path(state, launch.run_id) / "islands" / str(launch.island) / "env.json",
                                             secrets.read_text())
        return {"creds": bus_auth.issue_learner(state, launch.run_id, launch.learner, launch.generation),
                "ca": Path(ca) if ca else None, "env_file": env_file}

    def statuses(self, islands: list[IslandRef]) -> list[IslandStatus]:
        jobs = self.queue()
        if any(r.handle.isdigit() and int(r.handle) not in jobs for r in islands):
            jobs = self.queue(fresh=True)     # started since the last read, by another launcher instance (a cluster's)
        by_name = {j.name: j for j in sorted(jobs.values(), key=lambda j: j.job_id)}
        found = [jobs.get(int(r.handle)) if r.handle.isdigit() else by_name.get(job_name(r.run_id, r.island, r.generation))
                 for r in islands]
        return [IslandStatus(False, None, "the managed job is gone") if j is None else status_of(j.status) for j in found]

    def status(self, run_id: str, island: int, generation: int, handle: str) -> IslandStatus:
        return self.statuses([IslandRef(run_id, island, generation, handle)])[0]

    def stop(self, run_id: str, island: int, generation: int, handle: str) -> None:
        """Cancel the job by its recorded id; without one (a generation whose start the launcher's state never
        recorded), every job of the generation's name."""
        if handle.isdigit():
            ids = [int(handle)]
        else:
            ids = [j.job_id for j in self.queue().values() if j.name == job_name(run_id, island, generation)]
        if ids:
            self.api.jobs_cancel(ids)
