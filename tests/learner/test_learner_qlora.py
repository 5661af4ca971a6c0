"""QLoRA on the CPU: `base_quantization="nf4"` builds the learner over a base quantized by bitsandbytes' CPU
backend (double quantization), trains LoRA adapters whose names are those of a bf16-base LoRA run (the
artifact is an adapter for the bf16 base), lowers the loss and syncs through the real SyncerCore; where NF4
cannot run, the learner says what to do."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch import dist, quant
from yeto.learners.torch.build import build, resolve_accel
from yeto.learners.torch.hook import make_hook
from yeto.learners.torch.loop import train
from yeto.learners.torch.tuning import trainable_parameters
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import RoundMerged
from yeto.services.syncer.core import SyncerCore

sys.path.insert(0, str(Path(__file__).parent))
import learner_loopback
import learner_tiny

needs_bnb = pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes not installed")


def _recipe(model_dir: Path, **changes) -> TrainRecipe:
    sync = SyncConfig(num_fragments=2, inner_steps=4, alpha=0.0, quorum=1, grace_max_s=0.5, codec_up="q4")
    return TrainRecipe(model=str(model_dir), lr=3e-3, warmup_steps=2, max_steps=24, micro_batch=4, seq_len=64,
                       sync=sync.to_dict(), **changes)


@needs_bnb
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_nf4_learner_trains_lora_over_a_4bit_base_on_the_cpu_and_syncs(tmp_path):
    torch.set_num_threads(1)
    # The tiny Llama's quantized layers all have output sizes that are multiples of 32 (q/o 64, k/v 32,
    # gate/up 128, down 64), which bitsandbytes' CPU backend asks for.
    model_dir = learner_tiny.write_model_dir(tmp_path / "model")
    recipe = _recipe(model_dir, base_quantization="nf4")
    accel = resolve_accel(recipe, local_rank=0, prefer="cpu")
    built = build(recipe, accel=accel, topology=dist.Topology())
    assert quant.quantized_layers(built.model) == 2 * 7       # every q,k,v,o,gate,up,down of both layers
    four_bit = [p for p in built.model.parameters() if type(p).__name__ == "Params4bit"]
    assert all(p.dtype == torch.uint8 and p.quant_state.nested for p in four_bit)   # double quantized
    # Only the f32 adapters train, under the same names as over a bf16 base: the artifact is that base's adapter.
    plain = build(_recipe(model_dir), accel=accel, topology=dist.Topology())
    names = [n for n, _ in trainable_parameters(built.model)]
    assert names == [n for n, _ in trainable_parameters(plain.model)] and all("lora_" in n for n in names)
    assert all(p.dtype == torch.float32 for _, p in trainable_parameters(built.model))

    wire = learner_loopback.Loopback(SyncerCore(SyncConfig.from_dict(recipe.sync), run_id="r-q"))
    hook = make_hook(built.model, recipe, wire.transport("l0"), run_id="r-q", learner="l0", generation=0,
                     join_wait_s=5.0)
    data = learner_tiny.packed_batches(built.tokenizer, learner_tiny.chat_rows(200), seq_len=64, micro_batch=4)
    results = train(built.model, data, recipe, accel=accel, sync=hook)
    hook.join()
    losses = [r.loss for r in results]
    assert len(losses) == 24 and sum(losses[-4:]) < 0.9 * sum(losses[:4]), losses
    assert any(r.synced for r in results)
    assert len([e for e in wire.events if isinstance(e, RoundMerged)]) >= 4

    # The artifact is an adapter for the unquantized base, and its manifest says so; peft loads it onto that base.
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from yeto.schemas.artifact_layout import DEPLOY
    from yeto.services.finalizer.artifact import write_artifact
    state = {n: p.detach().numpy().copy() for n, p in trainable_parameters(built.model)}
    kind, _, _ = write_artifact(state, recipe={"train": recipe.to_dict()}, out=tmp_path / "a", run_id="r-q",
                                versions={0: 1}, acked=["l0"])
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert kind == "adapter" and manifest["adapter_for"] == "the bf16 base, trained over its NF4 quantization"
    assert manifest["recipe"]["train"]["base_quantization"] == "nf4"
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), tmp_path / "a" / DEPLOY)
    assert quant.quantized_layers(loaded) == 0 and torch.isfinite(loaded(torch.tensor([[2, 5, 6, 7]])).logits).all()


def test_nf4_is_refused_with_what_to_do_where_it_cannot_run(monkeypatch):
    assert "no npu backend" in quant.nf4_problem("npu") and "--base-quantization none" in quant.nf4_problem("npu")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    assert "pip install 'yeto[qlora]'" in quant.nf4_problem("cpu")
    recipe = TrainRecipe(model="m", base_quantization="nf4")
    with pytest.raises(ValueError, match=r"--base-quantization nf4: bitsandbytes is not installed"):
        quant.nf4_config(resolve_accel(recipe, local_rank=0, prefer="cpu"))


def test_nf4_recipe_needs_lora_and_replicas():
    for bad in ({"tuning": "full"}, {"shard": "fsdp"}):
        with pytest.raises(ValueError, match="use tuning lora, and shard ddp or auto"):
            TrainRecipe(model="m", base_quantization="nf4", **bad)
    with pytest.raises(ValueError, match="base_quantization 'int8' is not one of none, nf4"):
        TrainRecipe(model="m", base_quantization="int8")
