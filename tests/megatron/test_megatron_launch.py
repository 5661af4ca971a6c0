"""Real Megatron-Core runs through `yeto launch --island-backend megatron` on a tiny Mixtral: the syncer merges rounds,
the finalizer's full artifact loads in transformers as a Mixtral whose logits moved from the base's.

The fleet is the acceptance's, `--gpu local:2xcpu,local:2xcpu`: two islands of two expert-parallel ranks (each
island's second rank serves rank 0's reads and writes of its experts under real syncs), both in merged rounds. On a
machine with fewer than 4 CPUs it runs with --oversubscribe-cpus (schemas/capacity.py: up to two CPU learner
processes a CPU), and the launch's warning says so. It runs three times: each island EP 2 (full fine-tuning), each
island TP 2 (`--megatron-tp 2`: one expert-parallel group of two tensor-parallel ranks), and EP 2 with LoRA on the
attention projections, whose artifact is a peft adapter that loads onto the base."""
from __future__ import annotations

import os

import pytest
import torch

from e2e_stack import Stack
from yeto.infra import stack

pytest.importorskip("megatron.core")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
FLEET = "local:2xcpu,local:2xcpu"
SPLITS = {"EP2": ("--tuning", "full"), "EP1xTP2": ("--tuning", "full", "--megatron-tp", "2"),
          "EP2-lora": ("--tuning", "lora", "--lora-r", "4", "--lora-alpha", "8")}
"""Each run's flags, by LearnerStarted's shard (the split each island runs) and, for LoRA, -lora."""
CPUS = os.cpu_count() or 1
OVERSUBSCRIBE = ("--oversubscribe-cpus",) if CPUS < 4 else ()
if CPUS < 2:
    pytest.skip("4 learner processes on 1 CPU: more than --oversubscribe-cpus allows", allow_module_level=True)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The YETO_HOME of every split's run; its stack goes down after the last of them, even one that failed."""
    home = tmp_path_factory.mktemp("megatron-run") / "home"
    yield home
    stack.down(home)


@pytest.fixture(scope="module", params=sorted(SPLITS))
def run(request, home, tiny_moe):
    """(stack, what `yeto launch --wait` printed, the split, the run id): one run per split."""
    s, run_id = Stack(home, tiny_moe["model"], tiny_moe["data"]), f"megatron-{request.param.lower()}"
    try:
        s.launch(run_id, "--island-backend", "megatron", "--max-steps", "40", "--micro-batch", "2",
                 *OVERSUBSCRIBE, *SPLITS[request.param], islands=FLEET,
                 train_flags=("--seq-len", "32", "--sync-every", "8", "--fragments", "2", "--lr", "3e-3",
                              "--warmup-steps", "2"))
        yield s, s.finish(run_id, timeout=540), request.param, run_id
    finally:   # a launch that failed half way is not left waiting (the stack itself goes down with `home`)
        s.stop_launches()


def test_every_megatron_island_pushes_to_merged_rounds_and_the_run_finalizes(run):
    s, output, split, run_id = run
    assert "run finalized (max_steps)" in output, output
    assert ("--oversubscribe-cpus: 4 CPU learner processes share" in output) == bool(OVERSUBSCRIBE), output
    islands = FLEET.split(",")
    started = s.events(run_id, "LearnerStarted")
    assert {e["backend"] for e in started} == {"megatron"} and {e["shard"] for e in started} == {split.split("-")[0]}
    assert {e["tuning"] for e in started} == {"lora" if split.endswith("-lora") else "full"}
    assert sorted(e["ranks"] for e in started) == sorted(int(i.split(":")[1].split("x")[0]) for i in islands)
    merged = s.events(run_id, "RoundMerged")
    every = [e for e in merged if {f"island-{i}" for i in range(len(islands))} <= set(e["responders"])]
    assert every, f"rounds with every learner: {[(e['fragment'], e['responders']) for e in merged]}"


def test_the_artifact_loads_in_transformers_and_differs_from_the_base(run, tiny_moe):
    """Full runs: a Mixtral checkpoint; the LoRA run: a peft adapter of q/k/v/o on the base checkpoint."""
    from transformers import AutoModelForCausalLM
    s, split, run_id = run[0], run[2], run[3]
    (written,) = s.events(run_id, "ArtifactWritten")
    where = os.path.join(written["local_path"], "artifact")             # docs/ARTIFACTS.md
    base = AutoModelForCausalLM.from_pretrained(tiny_moe["model"])
    if split.endswith("-lora"):
        from peft import PeftConfig, PeftModel
        assert written["artifact_kind"] == "adapter"
        assert sorted(PeftConfig.from_pretrained(where).target_modules) == ["k_proj", "o_proj", "q_proj", "v_proj"]
        tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_moe["model"]), where)
    else:
        assert written["artifact_kind"] != "adapter"
        tuned = AutoModelForCausalLM.from_pretrained(where)
        assert tuned.config.model_type == "mixtral" and tuned.config.num_local_experts == 4
    ids = torch.arange(4, 20).unsqueeze(0)
    with torch.no_grad():
        assert not torch.allclose(tuned(ids).logits, base(ids).logits, atol=1e-3)
