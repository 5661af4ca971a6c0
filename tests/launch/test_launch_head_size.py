"""`yeto launch` sizes the head VM for the syncer before renting anything, refuses with the numbers when no head
holds it, and --syncers starts shards where this command starts the stack (refused for a stack it does not run)."""
from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

import pytest

from yeto.cli.launch.cloud import size_head
from yeto.cli.launch.plan import local_stack_url, refuse_syncers_elsewhere
from yeto.infra import stack
from yeto.schemas.head_size import HeadTooSmall

pytestmark = pytest.mark.timeout(60)
FLEET = [{"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1}] * 4


def args(**kw) -> Namespace:
    return Namespace(**{"model": "llama31-70b", "weights_gb": None, "tuning": "lora", "syncers": None,
                        "head_memory_gb": None, **kw})


def launch(num_fragments: int = 8) -> SimpleNamespace:
    return SimpleNamespace(fleet=FLEET, recipe={"train": {"sync": {"num_fragments": num_fragments}}})


def test_the_head_is_sized_from_the_fleet_and_the_recipe_before_renting():
    head = size_head(args(), launch())
    assert head is not None and head.need_gb <= head.vm.memory_gb
    assert size_head(args(model="./some/local/dir"), launch()) is None, "an unknown size: the smallest head"
    sharded = size_head(args(syncers=2), launch())
    assert sharded is not None and sharded.syncer.num_syncers == 2


def test_a_syncer_no_head_holds_is_refused_with_the_numbers_and_what_to_do():
    with pytest.raises(HeadTooSmall, match=r"needs .* GiB .*--head-memory-gb \d+.*--tuning lora"):
        size_head(args(tuning="full"), launch())


def test_syncers_refused_for_a_stack_this_command_does_not_run_and_for_a_running_stack_with_another_count(tmp_path):
    refuse_syncers_elsewhere(args(), "nats://elsewhere:4222")               # no --syncers: nothing to refuse
    with pytest.raises(ValueError, match="yeto stack up --syncers 2"):
        refuse_syncers_elsewhere(args(syncers=2), "nats://elsewhere:4222")
    here = args(syncers=2, state_dir=str(tmp_path), nats_url=None)
    try:
        url = local_stack_url(here)                     # what `yeto launch --syncers 2` does with local islands
        rec = stack.read_record(stack.StackPaths(tmp_path))
        assert rec is not None and rec["url"] == url and {"syncer-0", "syncer-1"} <= set(rec["pids"])
        assert "syncer" not in rec["pids"]
        assert local_stack_url(args(state_dir=str(tmp_path), nats_url=None)) == url, "no --syncers: as it runs"
        with pytest.raises(ValueError, match="runs with --syncers 2; `yeto stack down` first"):
            local_stack_url(args(syncers=3, state_dir=str(tmp_path), nats_url=None))
    finally:
        stack.down(tmp_path)
