"""The learner's golden loss history: the tiny model of learner_tiny.py trained from a fixed seed, the loss of
every step, alone and through the DiLoCo step boundary with the real SyncerCore. Recorded on purpose by
scripts/gen_golden_learner.py into fixtures/golden_loss.json; test_learner_golden.py checks a run against it."""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch

import learner_loopback
import learner_tiny
from yeto.learners import accel
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.hook import make_hook
from yeto.learners.torch.loop import train
from yeto.learners.torch.model import load_model, load_tokenizer, resolve
from yeto.learners.torch.tuning import apply_tuning
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.core import SyncerCore

FIXTURE = Path(__file__).parent / "fixtures" / "golden_loss.json"
NUM_STEPS = 16
# One learner, its pushes merged at once (quorum 1, no grace): no clock or thread decides anything.
SYNC = SyncConfig(num_fragments=2, inner_steps=4, alpha=0.5, quorum=1, grace_max_s=0.0, codec_up="q4")


def loss_histories() -> dict[str, list[float]]:
    """{"local": losses, "diloco": losses}: full tuning of the tiny model, seed 0, one CPU thread."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(learner_tiny.write_model_dir(Path(tmp) / "model", seed=0))
        source = resolve(model_dir)
        recipe = TrainRecipe(model=model_dir, tuning="full", lr=3e-3, warmup_steps=4, max_steps=NUM_STEPS, micro_batch=4,
                             seq_len=64, seed=0, sync=SYNC.to_dict())
        tok = load_tokenizer(source)
        out = {}
        for arm in ("local", "diloco"):
            model = apply_tuning(load_model(source), recipe)
            hook = None
            if arm == "diloco":
                wire = learner_loopback.Loopback(SyncerCore(SYNC, run_id="golden"))
                hook = make_hook(model, recipe, wire.transport("l0"), run_id="golden", learner="l0", generation=0,
                                 join_wait_s=0.0)
            batches = learner_tiny.packed_batches(tok, learner_tiny.chat_rows(200), seq_len=64, micro_batch=4)
            results = train(model, batches, recipe, accel=accel.detect(prefer="cpu"), sync=hook)
            out[arm] = [r.loss for r in results]
    return out
