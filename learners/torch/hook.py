"""The torch learner's sync hook: learners/sync_hook.py's DilocoHook over a module's trainable parameters."""
from __future__ import annotations

from yeto.learners.diloco_sync import DilocoSync
from yeto.learners.sync_hook import DilocoHook
from yeto.learners.torch import shards
from yeto.learners.torch.adapter import TorchArrays
from yeto.learners.torch.shards import ShardedArrays
from yeto.learners.torch.tuning import trainable_parameters
from yeto.learners.transport.protocol import Transport
from yeto.schemas.recipe import SyncConfig

__all__ = ["DilocoHook", "connect_sync", "make_hook"]


def make_hook(model, recipe, transport: Transport, *, run_id: str, learner: str, generation: int,
              join_wait_s: float = 10.0, sends_init: bool = True) -> DilocoHook:
    """DilocoSync over `model`'s trainable parameters (the unwrapped module) with the recipe's sync options."""
    params = trainable_parameters(model)     # FSDP2 shards: rank 0 gathers and scatters whole tensors (shards.py)
    arrays = ShardedArrays(params) if shards.is_sharded(params) else TorchArrays.of(model)
    sync = DilocoSync(arrays, SyncConfig.from_dict(recipe.sync), run_id=run_id, learner=learner, generation=generation)
    return DilocoHook(sync, transport, join_wait_s=join_wait_s, sends_init=sends_init)


def connect_sync(built, recipe, args) -> DilocoHook:
    """The production hook: the NATS transport of learners/bus_client.py (connect, reconnect with
    backoff, buffer while disconnected, LearnerProgress events)."""
    if not args.nats_url:
        raise ValueError("--nats-url is required unless --no-sync is given")
    from yeto.learners import bus_client
    transport = bus_client.connect(nats_url=args.nats_url, run_id=args.run_id, learner=args.learner,
                                   generation=args.generation)
    # Version 0 needs one copy of the initial values on the wire: island 0 of the run's first generation
    # sends it; everyone else adopts it by checksum (or, if it never comes, sends its own after the wait).
    hook = make_hook(built.model, recipe, transport, run_id=args.run_id, learner=args.learner,
                     generation=args.generation, sends_init=args.learner_index == 0 and args.generation == 0)
    transport.declare_layout(hook.sync.layout)   # on the tape, and how the finalizer names the final tensors
    return hook
