"""Wiring of the launcher service onto the shared runner: state fold, decisions, backends, exit watcher."""
from __future__ import annotations

from yeto.infra.runner import ServiceSpec
from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.backends.skypilot import SkyPilotBackend
from yeto.services.launcher.effects import Effects
from yeto.services.launcher.logic import decide
from yeto.services.launcher.state import evolve


def spec(effects: Effects, *, tick_s: float = 2.0) -> ServiceSpec:
    return ServiceSpec(name="launcher", initial=dict, evolve=evolve, decide=decide, act=effects.act,
                       tick_s=tick_s, background=(effects.watcher(),))


def build(args) -> ServiceSpec:
    conf = args.settings
    backends = {"local": LocalBackend(conf.state_dir), "skypilot": SkyPilotBackend()}
    return spec(Effects(backends, conf.nats_url))
