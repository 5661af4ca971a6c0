"""Two torch learners (threads) train a tiny causal LM with LoRA through DilocoHook and the real
SyncerCore over an in-process wire: every merged round has both learners, they end on identical
globals, and the held-out loss drops."""
from __future__ import annotations

import itertools
import sys
import threading
from pathlib import Path

import pytest
import torch

from yeto.learners import accel
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.evaluate import evaluate
from yeto.learners.torch.hook import make_hook
from yeto.learners.torch.loop import train
from yeto.learners.torch.model import load_model, load_tokenizer, resolve
from yeto.learners.torch.tuning import apply_tuning
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import RoundMerged
from yeto.services.syncer import liveness
from yeto.services.syncer.core import SyncerCore

sys.path.insert(0, str(Path(__file__).parent))
import learner_loopback
import learner_tiny


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_learners_merge_every_round_and_end_on_identical_globals(tmp_path, monkeypatch):
    # Liveness is not what this test checks (tests/training/test_training_liveness.py does): a learner silent past
    # its bound (3 s at least) rightly leaves a round to the other, and on a loaded box one of these two threads was
    # (a round of fragment 0 merged with l0 alone, 5 runs of 5 with 4 CPU burners beside it). A 30 s bound keeps the
    # check on the merge itself: every round waits for both.
    monkeypatch.setattr(liveness, "FLOOR_S", 30.0)
    torch.set_num_threads(1)
    model_dir = learner_tiny.write_model_dir(tmp_path / "model")
    sync = SyncConfig(num_fragments=2, inner_steps=4, alpha=0.0, quorum=2, grace_max_s=0.5, codec_up="q4")
    recipe = TrainRecipe(model=str(model_dir), lr=3e-3, warmup_steps=2, max_steps=24, micro_batch=4, seq_len=64,
                         sync=sync.to_dict())
    source = resolve(recipe.model)
    tok = load_tokenizer(source)
    wire = learner_loopback.Loopback(SyncerCore(sync, run_id="r-l"))
    models = [apply_tuning(load_model(source), recipe) for _ in range(2)]
    hooks = [make_hook(m, recipe, wire.transport(f"l{i}"), run_id="r-l", learner=f"l{i}", generation=0,
                       join_wait_s=5.0) for i, m in enumerate(models)]
    heldout = list(itertools.islice(learner_tiny.packed_batches(tok, learner_tiny.chat_rows(40, seed=9), seq_len=64,
                                                                micro_batch=4), 3))
    policy = accel.detect(prefer="cpu")
    before = evaluate(models[0], heldout, accel=policy)
    results: dict[int, list] = {}

    def learner(i: int) -> None:
        data = learner_tiny.packed_batches(tok, learner_tiny.chat_rows(200, seed=i), seq_len=64, micro_batch=4, seed=i)
        results[i] = train(models[i], data, recipe, accel=policy, sync=hooks[i])

    threads = [threading.Thread(target=learner, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    assert set(results) == {0, 1}
    for hook in hooks:               # deliver what is still in flight
        hook.join()
    merged = [e for e in wire.events if isinstance(e, RoundMerged)]
    assert len(merged) >= 6 and all(set(e.responders) == {"l0", "l1"} for e in merged)
    assert any(r.synced for r in results[0]) and any(r.synced for r in results[1])
    for p in hooks[0].sync.active:
        assert hooks[0].sync.anchors[p].tobytes() == hooks[1].sync.anchors[p].tobytes()
        assert hooks[0].sync.versions[p] == hooks[1].sync.versions[p] >= 2
    assert evaluate(models[0], heldout, accel=policy) < 0.9 * before
