"""Wiring of the finalizer service onto the shared runner: the run fold with its final-cut machine and their
snapshot codec, decisions, artifact effects."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from yeto.infra.runner import ServiceSpec, StateCodec
from yeto.services.finalizer import state
from yeto.services.finalizer.effects import Effects
from yeto.services.finalizer.logic import make_decide
from yeto.services.finalizer.warm import warm_artifact_imports

ACCOUNTING_PERIOD_S = 5.0   # the tick: budget and time limits are checked this often
CODEC = StateCodec(version=state.CODEC_VERSION, dump=state.dump, load=state.load)


def spec(state_dir: Path, *, tick_s: float = ACCOUNTING_PERIOD_S, nats_url: str | None = None) -> ServiceSpec:
    """`nats_url`: where the artifact writer process (writer.py) reads the final state; without it no artifact."""
    effects = Effects(state_dir, nats_url)
    return ServiceSpec(name="finalizer", initial=dict, evolve=state.evolve, decide=make_decide(tick_s),
                       act=effects.act, tick_s=tick_s, codec=CODEC,
                       background=(partial(warm_artifact_imports, writer=effects.writer),))


def build(args) -> ServiceSpec:
    """The finalizer process's service (its entry point, `python -m yeto.services.finalizer`, forked or spawned)."""
    return spec(args.settings.state_dir, nats_url=args.settings.nats_url)
