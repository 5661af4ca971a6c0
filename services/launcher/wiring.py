"""Wiring of the launcher service onto the shared runner: the run fold and its snapshot codec, decisions, backends,
exit watcher."""
from __future__ import annotations

import functools
import logging
import os
from datetime import datetime, timezone

from yeto.infra.accelerators import npu_devices
from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus import nats_watch_maker
from yeto.infra.model_source import resolve_model
from yeto.infra.runner import ServiceSpec, StateCodec
from yeto.infra.settings import seconds_from_env
from yeto.schemas.capacity import MAX_ISLANDS, Capacity
from yeto.schemas.commands import LaunchRun
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.services.launcher import state
from yeto.services.launcher.backends.external import ExternalBackend
from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.backends.skypilot import SkyPilotBackend
from yeto.services.launcher.cuda_memory import cuda_free_gb
from yeto.services.launcher.effects import Effects
from yeto.services.launcher.liveness import FLOOR_S
from yeto.services.launcher.logic import decide
from yeto.services.launcher.memory_fit import over_memory

CODEC = StateCodec(version=state.CODEC_VERSION, dump=state.dump, load=state.load)
log = logging.getLogger(__name__)


def host_capacity() -> Capacity:
    """This machine's CPUs and CUDA devices (for local islands) and the island cap ($YETO_MAX_ISLANDS, default 64)."""
    gpus = cuda_devices()
    try:
        max_islands = int(os.environ.get("YETO_MAX_ISLANDS", MAX_ISLANDS))
    except ValueError:
        log.warning("YETO_MAX_ISLANDS=%r is not a number; using %d", os.environ["YETO_MAX_ISLANDS"], MAX_ISLANDS)
        max_islands = MAX_ISLANDS
    return Capacity(cpus=os.cpu_count() or 1, gpus=gpus, max_islands=max_islands, npus=npu_devices())


def silence_floor_s() -> float:
    """The least silence bound of an island that showed its pace ($YETO_SILENCE_FLOOR_S, default liveness.FLOOR_S 60 s):
    a head whose islands are near and quiet may replace a frozen one sooner (docs/CONFIG.md)."""
    return seconds_from_env("YETO_SILENCE_FLOOR_S", FLOOR_S, log)


def host_fit(cmd: LaunchRun) -> str | None:
    """memory_fit.over_memory with this machine's memory, its CUDA devices' free memory (for a local CUDA island) and
    the model's size (its local safetensors' headers, or the alias table); a model of unknown size, or a recipe the
    launch refuses on its own, is not checked here."""
    try:
        recipe = LaunchRecipe.upcast(cmd.recipe)
        weights_gb = resolve_model(recipe.train.model).weights_gb if recipe.train.model else None
    except (ValueError, OSError):
        return None
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    local_cuda = any(s.get("cloud") == "local" and s.get("gpu") == "cuda" for s in cmd.fleet)
    cuda_gb = cuda_free_gb() if local_cuda and weights_gb and cuda_devices() else None
    return over_memory(cmd.fleet, recipe, weights_gb=weights_gb, host_memory_gb=memory_gb, cuda_memory_gb=cuda_gb)


def cuda_devices() -> int:
    """CUDA devices here without importing torch (2 s at every launcher start): the NVIDIA driver's list of GPUs,
    narrowed by $CUDA_VISIBLE_DEVICES as CUDA narrows it; 0 without the driver."""
    try:
        found = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return found
    return min(found, len([d for d in visible.split(",") if d.strip() and not d.strip().startswith("-")]))


def spec(effects: Effects, *, tick_s: float = 2.0, capacity: Capacity | None = None) -> ServiceSpec:
    """`capacity` None: this machine's (host_capacity())."""
    bound = functools.partial(decide, capacity=capacity or host_capacity(), fit=host_fit, floor_s=silence_floor_s(),
                              heard_since=datetime.now(timezone.utc))   # silence before this start is not counted
    return ServiceSpec(name="launcher", initial=dict, evolve=state.evolve, decide=bound, act=effects.act,
                       tick_s=tick_s, background=(effects.watcher(), serve_watches), codec=CODEC)


async def serve_watches(ctx) -> None:
    """Learners' watch consumers, made when a learner asks (its credential may make none: infra/bus/nats_watch_maker.py)."""
    await nats_watch_maker.serve(ctx.bus, ctx.stop)


def build(args) -> ServiceSpec:
    conf = args.settings
    backends = {"local": LocalBackend(conf.state_dir, zygote=True), "skypilot": SkyPilotBackend(conf.state_dir),
                "external": ExternalBackend(conf.state_dir, conf.nats_url)}
    return spec(Effects(backends, conf.nats_url, revoke=functools.partial(bus_auth.revoke_run, conf.state_dir)))
