"""Wiring of the finalizer service onto the shared runner: projections, decisions, artifact effects."""
from __future__ import annotations

from pathlib import Path

from yeto.infra.runner import ServiceSpec
from yeto.services.finalizer.effects import Effects
from yeto.services.finalizer.logic import make_decide
from yeto.services.finalizer.state import evolve

ACCOUNTING_PERIOD_S = 5.0   # the tick: budget and time limits are checked this often


def spec(state_dir: Path, *, tick_s: float = ACCOUNTING_PERIOD_S) -> ServiceSpec:
    return ServiceSpec(name="finalizer", initial=dict, evolve=evolve, decide=make_decide(tick_s),
                       act=Effects(state_dir).act, tick_s=tick_s)


def build(args) -> ServiceSpec:
    return spec(args.settings.state_dir)
