"""Wiring of the finalizer service onto the shared runner: the run fold with its final-cut machine and their
snapshot codec, decisions, artifact effects."""
from __future__ import annotations

import sys
from pathlib import Path

from yeto.infra.runner import ServiceSpec, StateCodec
from yeto.services.finalizer import state
from yeto.services.finalizer.effects import Effects
from yeto.services.finalizer.logic import make_decide
from yeto.services.finalizer.warm import warm_artifact_imports

ACCOUNTING_PERIOD_S = 5.0   # the tick: budget and time limits are checked this often
CODEC = StateCodec(version=state.CODEC_VERSION, dump=state.dump, load=state.load)


def spec(state_dir: Path, *, tick_s: float = ACCOUNTING_PERIOD_S) -> ServiceSpec:
    return ServiceSpec(name="finalizer", initial=dict, evolve=state.evolve, decide=make_decide(tick_s),
                       act=Effects(state_dir).act, tick_s=tick_s, codec=CODEC, background=(warm_artifact_imports,))


def keep_bitsandbytes_out() -> None:
    """The finalizer process never quantizes: keep bitsandbytes out of it. peft (the adapter's config) and diffusers
    (the samples' LoRA) import it whenever it is installed, and with it torch's inductor: ~1 CPU s of the first
    artifact a finalizer writes (`from peft import LoraConfig` 4.1 against 3.1 CPU s, 2026-12-06). A None in
    sys.modules reads as "not installed" to both, as learners/torch/quant.py's keep_out_unless does for a learner."""
    if "bitsandbytes" not in sys.modules:
        sys.modules["bitsandbytes"] = None   # type: ignore[assignment]


def build(args) -> ServiceSpec:
    """The finalizer process's service (its entry point, `python -m yeto.services.finalizer`, forked or spawned)."""
    keep_bitsandbytes_out()
    return spec(args.settings.state_dir)
