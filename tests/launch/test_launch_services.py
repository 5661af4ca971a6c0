"""Launcher and finalizer as real services on a real nats-server, with real local processes (a stand-in learner):
a killed island is replaced, a restarted launcher carries on without spawning twice, and `yeto down` runs the
final cut through marking, bounded acknowledgement wait and island teardown."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from waiting import until
from yeto.infra.bus import Bus, connect
from yeto.infra.runner import run_service
from yeto.schemas import codecs
from yeto.schemas.base import parse
from yeto.schemas.commands import LaunchRun, StopRun
from yeto.schemas.final import FinalCutDone, LearnerFinalAck
from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.subjects import keyframe_subject, run_events
from yeto.services.finalizer import wiring as finalizer_wiring
from yeto.services.launcher import wiring as launcher_wiring
from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.effects import Effects

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False, "price_per_hour": 0.0}


def sleeper(launch, recipe_path, rank, port):
    # A stand-in learner that runs until it is stopped: the sleep is what it does, not a wait for anything.
    return [sys.executable, "-c", "import time; time.sleep(120)"]


class Tape:
    """Every event of one run, collected as it is published; `wait` wakes on each new one."""

    def __init__(self):
        self.events: list = []
        self.changed = asyncio.Event()

    async def start(self, bus: Bus, run_id: str):
        async def collect(delivery):
            self.events.append(parse(delivery.data))
            self.changed.set()
        self.sub = await bus.watch(run_events(run_id), collect)

    def of(self, type_: str, **match) -> list:
        return [e for e in self.events if e.type == type_ and all(getattr(e, k) == v for k, v in match.items())]

    async def wait(self, type_: str, count: int = 1, timeout: float = 30.0, **match) -> list:
        def enough():
            got = self.of(type_, **match)
            return got if len(got) >= count else None
        return await until(enough, timeout, f"{count}x {type_} {match}", changed=self.changed,
                           detail=lambda: f"seen {[e.type for e in self.events]}")


def start_launcher(url: str, backend: LocalBackend, name: str):
    """The launcher service in this event loop; its list of decisions on ticks (msg None) tells how far it got:
    the first comes after it folded the stream (the reconcile), the next ones on its ticks."""
    stop, ticks = asyncio.Event(), []
    spec = launcher_wiring.spec(Effects({"local": backend}, url, poll_s=0.2), tick_s=0.5)

    def decide(state, msg, now):
        intents = spec.decide(state, msg, now)
        if msg is None:
            ticks.append(intents)
        return intents
    task = asyncio.create_task(run_service(dataclasses.replace(spec, decide=decide), url, instance=name, stop=stop))
    return stop, task, ticks


async def test_island_replacement_launcher_restart_and_graceful_final_cut(fresh_nats, tmp_path, run_id):
    url = fresh_nats.url
    backend = LocalBackend(tmp_path, rank_argv=sleeper)
    bus = await connect(url, name="test")
    tape = Tape()
    await tape.start(bus, run_id)
    stop_l, launcher, _ = start_launcher(url, backend, "launcher-a")
    stop_f = asyncio.Event()
    finalizer = asyncio.create_task(run_service(finalizer_wiring.spec(tmp_path, tick_s=0.5), url, instance="fin", stop=stop_f))
    try:
        recipe = {"train": {"model": "m"}, "limits": {}, "final_ack_timeout_s": 2, "recover_timeout_s": 60}
        await bus.publish(LaunchRun(id=f"{run_id}-launch", run_id=run_id, fleet=[SPEC, SPEC], recipe=recipe))
        await tape.wait("IslandUp", 2)

        backend.stop(run_id, 0, 0, "", sig=signal.SIGKILL)                 # what `yeto chaos kill` does
        (replaced,) = await tape.wait("IslandReplaced", 1, island=0)
        assert replaced.generation == 1 and tape.of("IslandPreempted", island=0)[0].reason.startswith("killed")

        stop_l.set()                                                       # the launcher dies and comes back
        await launcher
        stop_l, launcher, ticks = start_launcher(url, backend, "launcher-b")
        # Three decisions without a message: the reconcile after its replay and a tick were both carried out.
        await until(lambda: len(ticks) >= 3, 30, "launcher-b to reconcile and tick")
        assert backend.current_generation(run_id, 0) == 1 and backend.current_generation(run_id, 1) == 0
        backend.stop(run_id, 1, 0, "", sig=signal.SIGKILL)
        await tape.wait("IslandReplaced", 1, island=1)

        await bus.publish(StopRun(id=f"{run_id}-down", run_id=run_id))    # `yeto down`
        (cut,) = await tape.wait("FinalCutRequested")
        assert cut.reason == "user"
        # The syncer's part: the final keyframe in the keyframe stream, then FinalCutDone.
        values = np.arange(8, dtype=np.float32)
        payload = codecs.F32.encode(values)
        header = FragmentHeader(run_id=run_id, fragment=0, kind="keyframe", version=3, codec="f32", numel=8,
                                sha256="", chunk_sha256="")
        await bus.publish_raw(keyframe_subject(run_id, 0), payload, headers=header.to_nats())
        await bus.publish(FinalCutDone(id=f"{run_id}-cut", run_id=run_id, source="syncer", versions={0: 3},
                                       snapshot_path="/s", sha256="x", keyframe_versions={0: 3}))
        await tape.wait("CheckpointMarkedFinal")
        await bus.publish(LearnerFinalAck(id=f"{run_id}-ack0", run_id=run_id, learner="island-0", generation=1, versions={0: 3}))
        stopped = await tape.wait("IslandStopped", 2, timeout=20)           # the other learner never acks: 2 s, then teardown
        assert sorted((e.island, e.generation) for e in stopped) == [(0, 1), (1, 1)]
        for island in (0, 1):
            await until(lambda island=island: not backend.status(run_id, island, 1, "").running, 10,
                        f"island {island} generation 1 to be gone after IslandStopped")
        starts = [json.loads(p.read_text())["pgid"] for p in tmp_path.glob(f"runs/{run_id}/islands/*/g*/group.json")]
        assert len(starts) == 4                                            # 2 islands x 2 generations, none twice
    finally:
        stop_l.set()
        stop_f.set()
        await asyncio.gather(launcher, finalizer, return_exceptions=True)
        await tape.sub.close()
        await bus.close()
        for island in (0, 1):
            for gen in (0, 1):
                backend.stop(run_id, island, gen, "", sig=signal.SIGKILL)


def test_the_launcher_counts_this_machines_capacity_without_importing_torch(tmp_path):
    """torch takes ~2 s to import; the launcher's start (every stack up) must not pay it to count CUDA devices."""
    code = ("import sys; from yeto.services.launcher.wiring import host_capacity; cap = host_capacity(); "
            "print(cap.cpus, cap.gpus, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    cpus, gpus, imported = out.stdout.split()
    assert int(cpus) == (os.cpu_count() or 1) and int(gpus) >= 0 and imported == "False"
