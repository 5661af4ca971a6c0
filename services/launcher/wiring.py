"""Wiring of the launcher service onto the shared runner: the run fold and its snapshot codec, decisions, backends,
exit watcher."""
from __future__ import annotations

from yeto.infra.runner import ServiceSpec, StateCodec
from yeto.services.launcher import state
from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.backends.skypilot import SkyPilotBackend
from yeto.services.launcher.effects import Effects
from yeto.services.launcher.logic import decide

CODEC = StateCodec(version=state.CODEC_VERSION, dump=state.dump, load=state.load)


def spec(effects: Effects, *, tick_s: float = 2.0) -> ServiceSpec:
    return ServiceSpec(name="launcher", initial=dict, evolve=state.evolve, decide=decide, act=effects.act,
                       tick_s=tick_s, background=(effects.watcher(),), codec=CODEC)


def build(args) -> ServiceSpec:
    conf = args.settings
    backends = {"local": LocalBackend(conf.state_dir), "skypilot": SkyPilotBackend()}
    return spec(Effects(backends, conf.nats_url))
