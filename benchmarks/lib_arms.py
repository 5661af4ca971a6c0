"""The two arms of the quality comparison on equal hardware, tokens, data order and seeds.

sync: one model whose every optimizer step averages the gradients of M ranks' micro-batches (the real
loop with grad_accum = M over the M data shards interleaved: exactly DDP's token-weighted average).
yeto: M islands, each the real loop on its own shard, synchronized by the real DilocoHook and SyncerCore
(benchmarks/lib_islands.py); quality is measured on the model exported from the syncer's f32 state
after its final cut, the way the finalizer builds the artifact.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from lib_islands import SimClock, SimNet, TurnHook, Turnstile, run_islands

from yeto.learners.api import DilocoHook, DilocoSync
from yeto.learners.api import accel as accel_policy
from yeto.learners.torch.api import (
    TorchArrays,
    TrainRecipe,
    apply_tuning,
    evaluate,
    heldout_batches,
    load_model,
    load_tokenizer,
    resolve,
    train,
    train_batches,
)
from yeto.schemas import codecs
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import LearnerRejected, RoundMerged
from yeto.services.syncer.api import SyncerCore, backend


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


def run_sync(recipe: TrainRecipe, ranks: int, *, device: str = "cpu", heldout_blocks: int = 64,
             eval_every: int = 0) -> Outcome:
    """Synchronous data parallelism over `ranks` ranks: batch t of every shard in every step.
    `eval_every` K > 0: stats["curve"] is [step, held-out CE] every K steps and at the end."""
    policy = accel_policy.detect(prefer=device)
    tok = load_tokenizer(resolve(recipe.model))
    model = build_model(recipe, policy.device)
    shards = [train_batches(recipe, tok, shard=m, num_shards=ranks) for m in range(ranks)]

    def interleaved():
        while True:
            for shard in shards:
                for _ in range(recipe.grad_accum):
                    yield next(shard)
    heldout = _heldout(recipe, tok, heldout_blocks)
    curve: list[list[float]] = []

    def probe(result) -> None:
        if eval_every and result.step % eval_every == 0 and result.step < recipe.max_steps:
            curve.append([result.step, evaluate(model, heldout, accel=policy)])
    results = train(model, interleaved(), recipe.replace(grad_accum=recipe.grad_accum * ranks), accel=policy,
                    on_step=probe)
    ce = evaluate(model, heldout, accel=policy)
    stats: dict = {"steps": len(results)}
    if eval_every:
        stats["curve"] = [*curve, [len(results), ce]]
    return Outcome(heldout_ce=ce, tokens=sum(r.tokens for r in results), stats=stats)


def export_state(core: SyncerCore, layout) -> dict[str, np.ndarray]:
    """Every trainable tensor from the syncer's exact f32 keyframes (what infra/globals_reader.py reads)."""
    flats = {}
    for p in layout.active:
        header, payload = core.fragments[p].exact_keyframe()
        flats[p] = codecs.codec(header.codec).decode(payload, header.numel)
    return unflatten(layout, flats)


def unflatten(layout, flats: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
    """Named tensors from each active fragment's flat f32 values."""
    out = {}
    for p, flat in flats.items():
        offset = 0
        for t in layout.fragments[p]:
            out[t.name] = flat[offset:offset + t.numel].reshape(t.shape)
            offset += t.numel
    return out


def load_state(model: torch.nn.Module, state: dict[str, np.ndarray]) -> None:
    arrays = TorchArrays.of(model)
    assert set(arrays.names()) == set(state), "the exported state must cover every trainable tensor"
    for name, value in state.items():
        arrays.write(name, value)


class _Probe:
    """Island 0's DilocoHook, which also copies the syncer's Θ (the global model) after every K-th step
    boundary: inside the turn, so the copy is the same on every run; read-only (no keyframe is built)."""

    def __init__(self, hook: DilocoHook, core: SyncerCore, every: int) -> None:
        self.hook, self.core, self.every = hook, core, every
        self.thetas: list[tuple[int, dict[int, np.ndarray]]] = []

    def __getattr__(self, name: str):
        return getattr(self.hook, name)

    def join(self) -> bool:
        return self.hook.join()

    def after_step(self, step: int, tokens: int) -> bool:
        changed = self.hook.after_step(step, tokens)
        if step % self.every == 0:
            self.thetas.append((step, {p: backend.to_host(f.theta).copy() for p, f in self.core.fragments.items()}))
        return changed


def _train_islands(models: list, hooks: list, turn: Turnstile, recipe: TrainRecipe, tok, policy) -> None:
    """Each island's training loop on its own thread and data shard, in the turnstile's order."""
    def body(m: int):
        return lambda: train(models[m], train_batches(recipe, tok, shard=m, num_shards=len(models)), recipe,
                             accel=policy, sync=hooks[m])
    run_islands([body(m) for m in range(len(models))], turn, [h.name for h in hooks])


def _flush_unsent(hooks: list) -> None:
    """Each island pushes every fragment's unsent progress, after applying the globals it has."""
    for hook in hooks:
        sync_m = hook.hook.sync
        sync_m.apply_globals()
        for p in sync_m.active:
            if sync_m.c_steps[p]:
                push = sync_m._push(p)      # what a final flush would send (no public API for it yet)
                hook.hook.transport.send_push(push.header, push.payload)


def _round_stats(net: SimNet, layout, *, islands: int, computed: int) -> dict:
    """Rounds, responders, goodput, bytes and the momentum's cosines, from the syncer's events."""
    merged = [e for e in net.events if isinstance(e, RoundMerged)]
    # RoundMerged.tokens counts a fragment's tokens: every computed token is merged once per active fragment.
    responders = float(np.mean([len(e.responders) for e in merged])) if merged else 0.0
    stats = {"islands": islands, "rounds": len(merged), "responders": responders,
             "goodput": sum(e.tokens for e in merged) / max(1, computed * len(layout.active)), "bytes_up": net.bytes_up,
             "bytes_down": net.bytes_down, "bytes_by_kind": dict(net.bytes_by_kind),
             "rejected": sum(isinstance(e, LearnerRejected) for e in net.events),
             "trainable": sum(layout.numel(p) for p in layout.active)}
    cos = [e.momentum_cos for e in merged if e.momentum_cos is not None]    # cos(delta, b): is the look-ahead right?
    if cos:
        stats.update(momentum_cos_mean=float(np.mean(cos)), momentum_opposed=sum(c < 0 for c in cos) / len(cos),
                     momentum_restarts=sum(e.momentum_restarted for e in merged))
    return stats


def run_yeto(recipe: TrainRecipe, sync: SyncConfig, islands: int, *, device: str = "cpu", step_s: list[float] | None = None,
             latency_s: float = 0.0, heldout_blocks: int = 64, run_id: str = "compare", flush: bool = False,
             eval_every: int = 0) -> Outcome:
    """M islands, one data shard each, simulated step times `step_s` (1 s each by default). `flush`: each
    island pushes every fragment's unsent progress when it finishes (learners do not do this today).
    `eval_every` K > 0: stats["curve"] is [step, held-out CE] of the syncer's global model after island 0's
    every K-th step (before the final cut), then of the final model at the last step."""
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
        if m == 0 and eval_every:
            inner = probe = _Probe(inner, net.core, eval_every)
        hooks.append(TurnHook(inner, clock, turn, name, step_s[m]))
        clocks.append(clock)
    _train_islands(models, hooks, turn, recipe, tok, policy)
    end = max(c.t for c in clocks)
    if flush:
        net.advance(end)
        _flush_unsent(hooks)
    net.advance(end + 1e9)                  # pushes still in flight reach the syncer
    net.perform(net.core.final_cut(), end)
    final, heldout, layout = build_model(recipe, policy.device), _heldout(recipe, tok, heldout_blocks), hooks[0].hook.sync.layout
    curve: list[list[float]] = []
    for step, thetas in (probe.thetas if eval_every else []):
        if step < recipe.max_steps:
            load_state(final, unflatten(layout, {p: thetas[p] for p in layout.active}))
            curve.append([step, evaluate(final, heldout, accel=policy)])
    load_state(final, export_state(net.core, layout))
    ce = evaluate(final, heldout, accel=policy)
    computed = sum(h.tokens for h in hooks)
    stats = _round_stats(net, layout, islands=islands, computed=computed)
    if eval_every:
        stats["curve"] = [*curve, [recipe.max_steps, ce]]
    return Outcome(heldout_ce=ce, tokens=computed, stats=stats)
