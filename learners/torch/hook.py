"""The torch learner's sync hook over a module: learners/sync_hook.py's DilocoHook over its trainable parameters."""
from __future__ import annotations

from yeto.learners import sync_hook
from yeto.learners.diloco_sync import ArrayAdapter
from yeto.learners.sync_hook import DilocoHook
from yeto.learners.torch import shards
from yeto.learners.torch.adapter import TorchArrays
from yeto.learners.torch.shards import ShardedArrays
from yeto.learners.torch.tuning import trainable_parameters
from yeto.learners.transport.protocol import Transport

__all__ = ["DilocoHook", "make_hook", "parameter_counts", "torch_arrays"]


def torch_arrays(model) -> ArrayAdapter:
    """The trainable parameters of the unwrapped module as the sync reads and writes them; FSDP2 shards: rank 0
    gathers and scatters whole tensors (shards.py)."""
    params = trainable_parameters(model)
    return ShardedArrays(params) if shards.is_sharded(params) else TorchArrays.of(model)


def parameter_counts(model) -> dict[str, int]:
    """Trainable and total parameters of a module (an FSDP2 shard counts the whole tensor)."""
    return dict(trainable=sum(p.numel() for _, p in trainable_parameters(model)),
                parameters=sum(p.numel() for p in model.parameters()))


def make_hook(model, recipe, transport: Transport, *, run_id: str, learner: str, generation: int,
              join_wait_s: float = 10.0, sends_init: bool = True) -> DilocoHook:
    """DilocoSync over `model`'s trainable parameters (the unwrapped module) with the recipe's sync options."""
    return sync_hook.make_hook(torch_arrays(model), recipe.sync, transport, run_id=run_id, learner=learner, generation=generation,
                               join_wait_s=join_wait_s, sends_init=sends_init)
