"""The two arms of the quality comparison on equal hardware, tokens, data order and seeds.

sync: one model whose every optimizer step averages the gradients of M ranks' micro-batches (the real
loop with grad_accum = M over the M data shards interleaved: exactly DDP's token-weighted average).
yeto: M islands, each the real loop on its own shard, synchronized by the real DilocoHook and SyncerCore
(benchmarks/lib_islands.py); quality is measured on the model exported from the syncer's f32 state
after its final cut, the way the finalizer builds the artifact.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import torch
from lib_islands import SimClock, SimNet, TurnHook, Turnstile

from yeto.learners import accel as accel_policy
from yeto.learners.diloco_sync import DilocoSync
from yeto.learners.torch.adapter import TorchArrays
from yeto.learners.torch.batches import heldout_batches, train_batches
from yeto.learners.torch.evaluate import evaluate
from yeto.learners.torch.hook import DilocoHook
from yeto.learners.torch.loop import train
from yeto.learners.torch.model import load_model, load_tokenizer, resolve
from yeto.learners.torch.recipe import TrainRecipe
from yeto.learners.torch.tuning import apply_tuning
from yeto.schemas import codecs
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import LearnerRejected, RoundMerged
from yeto.services.syncer.core import SyncerCore


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """One arm's result at one seed."""

    heldout_ce: float
    """Held-out masked cross-entropy (nats per labelled token) of the final model."""
    tokens: int
    """Labelled tokens trained on, all ranks together."""
    stats: dict = field(default_factory=dict)
    """Arm-specific counters (rounds, bytes, goodput)."""


def build_model(recipe: TrainRecipe, device: torch.device) -> torch.nn.Module:
    """The seeded model every rank and island starts from (LoRA init is seeded by the recipe)."""
    torch.manual_seed(recipe.seed)
    return apply_tuning(load_model(resolve(recipe.model)), recipe).to(device)


def _heldout(recipe: TrainRecipe, tok, max_blocks: int) -> list:
    return heldout_batches(recipe, tok, max_blocks=max_blocks, batch_size=recipe.micro_batch)


def run_sync(recipe: TrainRecipe, ranks: int, *, device: str = "cpu", heldout_blocks: int = 64) -> Outcome:
    """Synchronous data parallelism over `ranks` ranks: batch t of every shard in every step."""
    policy = accel_policy.detect(prefer=device)
    tok = load_tokenizer(resolve(recipe.model))
    model = build_model(recipe, policy.device)
    shards = [train_batches(recipe, tok, shard=m, num_shards=ranks) for m in range(ranks)]

    def interleaved():
        while True:
            for shard in shards:
                for _ in range(recipe.grad_accum):
                    yield next(shard)
    results = train(model, interleaved(), recipe.replace(grad_accum=recipe.grad_accum * ranks), accel=policy)
    ce = evaluate(model, _heldout(recipe, tok, heldout_blocks), accel=policy)
    return Outcome(heldout_ce=ce, tokens=sum(r.tokens for r in results), stats={"steps": len(results)})


def export_state(core: SyncerCore, layout) -> dict[str, np.ndarray]:
    """Every trainable tensor from the syncer's exact f32 keyframes (what infra/globals_reader.py reads)."""
    out = {}
    for p in layout.active:
        header, payload = core.fragments[p].exact_keyframe()
        flat, offset = codecs.decode(header.codec, payload, header.numel), 0
        for t in layout.fragments[p]:
            out[t.name] = flat[offset:offset + t.numel].reshape(t.shape)
            offset += t.numel
    return out


def load_state(model: torch.nn.Module, state: dict[str, np.ndarray]) -> None:
    arrays = TorchArrays.of(model)
    assert set(arrays.names()) == set(state), "the exported state must cover every trainable tensor"
    for name, value in state.items():
        arrays.write(name, value)


def run_yeto(recipe: TrainRecipe, sync: SyncConfig, islands: int, *, device: str = "cpu", step_s: list[float] | None = None,
             latency_s: float = 0.0, heldout_blocks: int = 64, run_id: str = "compare", flush: bool = False) -> Outcome:
    """M islands, one data shard each, simulated step times `step_s` (1 s each by default). `flush`: each
    island pushes every fragment's unsent progress when it finishes (learners do not do this today)."""
    policy = accel_policy.detect(prefer=device)
    tok = load_tokenizer(resolve(recipe.model))
    recipe = recipe.replace(sync=sync.to_dict())
    names = [f"island-{m}" for m in range(islands)]
    step_s = step_s or [1.0] * islands
    net, turn = SimNet(SyncerCore(sync, run_id=run_id), latency_s=latency_s), Turnstile(names)
    models = [build_model(recipe, policy.device) for _ in names]
    hooks, clocks = [], []
    for m, name in enumerate(names):
        clock = SimClock()
        inner = DilocoHook(DilocoSync(TorchArrays.of(models[m]), sync, run_id=run_id, learner=name),
                           net.transport(name, clock), join_wait_s=60.0, clock=clock, sleep=clock.sleep)
        hooks.append(TurnHook(inner, clock, turn, name, step_s[m]))
        clocks.append(clock)
    errors: list[BaseException] = []

    def island(m: int) -> None:
        try:
            train(models[m], train_batches(recipe, tok, shard=m, num_shards=islands), recipe, accel=policy, sync=hooks[m])
        except BaseException as e:  # noqa: BLE001 - any failure of the island's thread, surfaced after join
            errors.append(e)
        finally:
            turn.finish(names[m])
    threads = [threading.Thread(target=island, args=(m,), daemon=True) for m in range(islands)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    end = max(c.t for c in clocks)
    if flush:
        net.advance(end)
        for hook in hooks:
            sync_m = hook.hook.sync
            sync_m.apply_globals()
            for p in sync_m.active:
                if sync_m.c_steps[p]:
                    push = sync_m._push(p)      # what a final flush would send (no public API for it yet)
                    hook.hook.transport.send_push(push.header, push.payload)
    net.advance(end + 1e9)                  # pushes still in flight reach the syncer
    net.perform(net.core.final_cut(), end)
    final = build_model(recipe, policy.device)
    load_state(final, export_state(net.core, hooks[0].hook.sync.layout))
    ce = evaluate(final, _heldout(recipe, tok, heldout_blocks), accel=policy)
    merged = [e for e in net.events if isinstance(e, RoundMerged)]
    computed = sum(h.tokens for h in hooks)
    layout = hooks[0].hook.sync.layout
    # RoundMerged.tokens counts a fragment's tokens: every computed token is merged once per active fragment.
    responders = float(np.mean([len(e.responders) for e in merged])) if merged else 0.0
    stats = {"islands": islands, "rounds": len(merged), "responders": responders,
             "goodput": sum(e.tokens for e in merged) / max(1, computed * len(layout.active)), "bytes_up": net.bytes_up,
             "bytes_down": net.bytes_down, "rejected": sum(isinstance(e, LearnerRejected) for e in net.events),
             "trainable": sum(layout.numel(p) for p in layout.active)}
    return Outcome(heldout_ce=ce, tokens=computed, stats=stats)
