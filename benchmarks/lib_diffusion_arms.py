"""The two arms of the diffusion benchmark on equal hardware, images and seeds (benchmarks/diffusion_diloco.py).

sync: one denoiser whose every optimizer step averages the gradients of M ranks' micro-batches (grad_accum = M over
the M image shards interleaved). yeto: M islands, each the real diffusion loop (learners/diffusion/loop.py) on its
own shard, synchronized by the real DilocoHook and SyncerCore over benchmarks/lib_islands.py's simulated network;
each island flushes its last partial interval at the end, as the learner process does (DilocoHook.close). Quality
is the held-out denoising loss (fixed timesteps and noise) of the LoRA exported from the syncer's f32 final cut.
"""
from __future__ import annotations

from dataclasses import dataclass

from lib_arms import export_state
from lib_islands import SimClock, SimNet, TurnHook, Turnstile, run_islands

from yeto.learners.api import DilocoHook, DilocoSync
from yeto.learners.api import accel as accel_policy
from yeto.learners.diffusion.api import DiffusionRecipe, build, media, noise_generator, objective, train
from yeto.learners.torch.api import TorchArrays
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import RoundMerged
from yeto.services.syncer.api import SyncerCore


@dataclass(frozen=True)
class Outcome:
    heldout: float          # held-out denoising loss of the final LoRA
    images: int             # images trained on, all ranks or islands together
    stats: dict


def _heldout(recipe: DiffusionRecipe, built) -> float:
    _, items = media.split_items(recipe)
    return objective.heldout_loss(built, [media.batch(items[i:i + 8], recipe) for i in range(0, len(items), 8)])


def run_sync(recipe: DiffusionRecipe, ranks: int, device: str) -> Outcome:
    policy = accel_policy.detect(prefer=device)
    built = build(recipe, accel=policy)
    items, _ = media.split_items(recipe)
    shards = [media.train_batches(items, recipe, shard=m, num_shards=ranks) for m in range(ranks)]

    def interleaved():
        while True:
            for shard in shards:
                yield next(shard)
    results = train(built, interleaved(), recipe.replace(grad_accum=recipe.grad_accum * ranks),
                    generator=noise_generator(recipe, 0))
    return Outcome(_heldout(recipe, built), sum(r.tokens for r in results), {"steps": len(results)})


def run_yeto(recipe: DiffusionRecipe, sync: SyncConfig, islands: int, device: str, *, step_s: list[float],
             run_id: str) -> Outcome:
    policy = accel_policy.detect(prefer=device)
    items, _ = media.split_items(recipe)
    names = [f"island-{m}" for m in range(islands)]
    net, turn = SimNet(SyncerCore(sync, run_id=run_id)), Turnstile(names)
    builts = [build(recipe, accel=policy) for _ in names]
    hooks, clocks = [], []
    for m, name in enumerate(names):
        clock = SimClock()
        inner = DilocoHook(DilocoSync(TorchArrays.of(builts[m].model), sync, run_id=run_id, learner=name),
                           net.transport(name, clock), join_wait_s=60.0, clock=clock, sleep=clock.sleep)
        hooks.append(TurnHook(inner, clock, turn, name, step_s[m]))
        clocks.append(clock)

    def island(m: int) -> None:
        train(builts[m], media.train_batches(items, recipe, shard=m, num_shards=islands), recipe,
              generator=noise_generator(recipe, m), sync=hooks[m])
        end = clocks[m].t + step_s[m]
        turn.enter(names[m], end)           # the learner's close, in simulated-time order like every boundary
        clocks[m].t = end
        hooks[m].hook.close()
    run_islands([lambda m=m: island(m) for m in range(islands)], turn, names)
    end = max(c.t for c in clocks)
    net.advance(end + 1e9)                  # pushes still in flight reach the syncer
    net.perform(net.core.final_cut(), end)
    layout = hooks[0].hook.sync.layout
    final = build(recipe, accel=policy)
    arrays = TorchArrays.of(final.model)
    for name, value in export_state(net.core, layout).items():
        arrays.write(name, value)
    merged = [e for e in net.events if isinstance(e, RoundMerged)]
    stats = {"rounds": len(merged), "bytes_up": net.bytes_up, "bytes_down": net.bytes_down,
             "trainable": sum(layout.numel(p) for p in layout.active)}
    return Outcome(_heldout(recipe, final), sum(h.tokens for h in hooks), stats)
