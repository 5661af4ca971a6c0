"""Wiring of the finalizer service onto the shared runner: the run fold with its final-cut machine and their
snapshot codec, decisions, artifact effects."""
from __future__ import annotations

from pathlib import Path

from yeto.infra.runner import ServiceSpec, StateCodec
from yeto.services.finalizer import state
from yeto.services.finalizer.effects import Effects
from yeto.services.finalizer.logic import make_decide

ACCOUNTING_PERIOD_S = 5.0   # the tick: budget and time limits are checked this often
CODEC = StateCodec(version=state.CODEC_VERSION, dump=state.dump, load=state.load)


def spec(state_dir: Path, *, tick_s: float = ACCOUNTING_PERIOD_S) -> ServiceSpec:
    return ServiceSpec(name="finalizer", initial=dict, evolve=state.evolve, decide=make_decide(tick_s),
                       act=Effects(state_dir).act, tick_s=tick_s, codec=CODEC)


def build(args) -> ServiceSpec:
    return spec(args.settings.state_dir)
