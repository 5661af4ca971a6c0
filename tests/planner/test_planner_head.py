"""The planner sizes the head VM for the syncer (schemas/head_size.py): `yeto shape` says which head and that the
syncer fits, a run whose syncer no head holds is not planned (the reason says what to do), --syncers is accounted."""
from __future__ import annotations

import pytest

from yeto.cli.main import main
from yeto.schemas.head_size import HEAD_VMS, REST_VCPUS, choose_head, trainable_of
from yeto.schemas.head_throughput import inner_steps_to_fit, size_head
from yeto.services.planner.api import FIXTURE_DIR
from yeto.services.planner.catalog import Offering, load_catalog
from yeto.services.planner.plan import plan_fleet
from yeto.services.planner.request import PlanRequest
from yeto.services.planner.signals import Signals

pytestmark = pytest.mark.timeout(60)
CATALOG = load_catalog(catalog_dir=FIXTURE_DIR)


def test_shape_plans_a_head_that_holds_the_syncer_and_says_so(capsys):
    assert main(["shape", "--model", "llama31-70b", "--budget-per-hour", "40", "--catalog-dir", str(FIXTURE_DIR)]) == 0
    out = capsys.readouterr().out
    assert "the syncer fits: head " in out and "GB for the rest" in out
    plan = plan_fleet(PlanRequest(model="llama31-70b", budget=40.0), CATALOG, Signals())
    head = plan.head
    assert head is not None and head["need_gb"] <= head["memory_gb"] and head["syncer_gb"] > 0
    assert plan.head_price_per_hour == max(0.19, head["price_per_hour"]) and plan.total_price_per_hour <= 40.0


def test_a_syncer_no_head_holds_is_not_planned_and_the_reason_says_what_to_do():
    plan = plan_fleet(PlanRequest(model="llama31-70b", budget=200.0, tuning="full"), CATALOG, Signals())
    assert not plan.feasible and "--head-memory-gb" in plan.reason and "trainable values" in plan.reason
    larger = plan_fleet(PlanRequest(model="llama31-70b", budget=200.0, tuning="full", head_memory_gb=16384), CATALOG,
                        Signals())
    assert larger.feasible and larger.head is not None and larger.head["memory_gb"] == 16384


def test_syncer_shards_are_sized_per_process():
    one = plan_fleet(PlanRequest(model="llama31-70b", budget=40.0), CATALOG, Signals())
    two = plan_fleet(PlanRequest(model="llama31-70b", budget=40.0, num_syncers=2), CATALOG, Signals())
    assert one.head and two.head and "x 2 shards" in two.head["describe"] and two.head["syncer_gb"] >= one.head["syncer_gb"]
    with pytest.raises(ValueError, match="--syncers"):
        PlanRequest(model="m", budget=1.0, num_syncers=0)


@pytest.mark.parametrize("budget, islands", [(4.9, 2), (5.0, 3), (40.0, 4)])
def test_the_head_the_syncer_needs_is_paid_within_the_budget(budget, islands):
    # A 30B model's LoRA syncer needs a 32 GB head ($0.384/hr): at $4.90/hr three A100 islands leave room for the
    # 16 GB head's $0.19 only, so the planner solves again with the larger head's price and rents two. (A 20B model's
    # needed 32 GB until its q4 pushes were counted kept encoded, 0.5 B a value: schemas/syncer_memory.py, 2026-12-06.)
    a100 = [Offering("runpod", "CA", "1x_A100-80GB_SECURE", "A100-80GB", 1, 8.0, 64.0, 1.39, 1.39)]
    plan = plan_fleet(PlanRequest(model="m", weights_gb=60.0, budget=budget), a100, Signals())
    assert plan.feasible and plan.head is not None and plan.head["memory_gb"] == 32 and len(plan.islands) == islands
    assert plan.islands_price_per_hour * 1.10 + plan.head_price_per_hour <= budget + 1e-9


def test_the_head_has_the_cores_its_rounds_need_against_the_fleets_interval():
    # LoRA on a 9B model: ~180M trainable values merge in a fraction of the fleet's H-step interval on one thread.
    lora = plan_fleet(PlanRequest(model="qwen35-9b", budget=40.0), CATALOG, Signals())
    rounds = lora.head["rounds"]
    assert rounds["fits"] and (rounds["syncers"], rounds["threads"]) == (1, 1)
    assert rounds["busy_s"] <= 0.5 * rounds["interval_s"] and "--syncers" not in rounds["describe"]
    # Full tuning of a 2B model on nine fast islands: 4G values a round every few seconds take shards and threads,
    # so the head is the type with the most vCPUs that holds the syncer, and the plan names --syncers.
    full = plan_fleet(PlanRequest(model="org/m", weights_gb=4.0, tuning="full", budget=100.0), CATALOG, Signals())
    rounds, head = full.head["rounds"], full.head
    assert rounds["syncers"] > 1 and f"launch with --syncers {rounds['syncers']}" in rounds["describe"]
    assert head["vcpus"] >= min(rounds["syncers"] * rounds["threads"] + REST_VCPUS, HEAD_VMS[-1].vcpus)
    assert head["memory_gb"] > HEAD_VMS[0].memory_gb and full.head_price_per_hour == head["price_per_hour"]
    # the model it answers from: the busiest syncer's rounds inside the margin, or the reason in numbers
    size = size_head(int(4.0e9 / 2), fragments=8, learners=len(full.islands), codec_up="q4", codec_down="q4",
                     interval_s=rounds["interval_s"])
    assert (size.instances, size.cores) == (rounds["syncers"], rounds["threads"])


def test_a_head_type_is_chosen_for_cores_as_well_as_ram():
    small = trainable_of(16.0, "lora")
    assert choose_head(small, num_learners=4).vm.name == HEAD_VMS[0].name
    assert choose_head(small, num_learners=4, cores=6).vm.vcpus >= 8
    assert choose_head(small, num_learners=4, cores=1000).vm == HEAD_VMS[-1]    # the most cores there are
    assert choose_head(small, num_learners=4, memory_gb=64, cores=1000).vm.memory_gb == 64


def test_where_no_head_keeps_up_at_the_default_h_the_plan_syncs_less_often_and_a_given_h_that_lags_is_refused(capsys):
    # Full tuning of an 8B model on fast islands: at H 24 even 8 syncers of 8 threads take more than half the interval.
    req = dict(model="org/m", weights_gb=16.0, tuning="full", budget=40.0, seq_len=1024)
    plan = plan_fleet(PlanRequest(**req), CATALOG, Signals())
    rounds = plan.head["rounds"]
    h = rounds["sync_every"]
    assert plan.feasible and rounds["fits"] and h > 24 and rounds["busy_s"] <= 0.5 * rounds["interval_s"]
    assert "at the default H 24 no head keeps up" in rounds["describe"] and f"(--sync-every {h})" in rounds["describe"]
    assert plan.launch_command.endswith(f"--syncers {rounds['syncers']} --sync-every {h}")
    # the fewest such inner steps: one fewer and the largest head lags
    fewer = size_head(trainable_of(16.0, "full"), fragments=8, learners=len(plan.islands), codec_up="q4", codec_down="q4",
                      interval_s=rounds["interval_s"] / h * (h - 1))
    assert not fewer.fits and inner_steps_to_fit(fewer, h - 1) == h
    # that H given is planned as it is; a given H that lags is refused before renting, naming the H that fits
    given = plan_fleet(PlanRequest(**req, inner_steps=h), CATALOG, Signals())
    assert given.feasible and given.head["rounds"]["sync_every"] == h and "default" not in given.head["rounds"]["describe"]
    refused = plan_fleet(PlanRequest(**req, inner_steps=24), CATALOG, Signals())
    assert not refused.feasible and "--sync-every 24: no head keeps up" in refused.reason
    assert f"(--sync-every {h})" in refused.reason
    assert main(["shape", "--model", "org/m", "--weights-gb", "16", "--tuning", "full", "--budget-per-hour", "40",
                 "--seq-len", "1024", "--catalog-dir", str(FIXTURE_DIR), "--sync-every", "24"]) == 1
    assert f"--sync-every {h}" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--sync-every must be at least 1"):
        PlanRequest(**req, inner_steps=0)
    # a fleet whose head keeps up at the default keeps it, and its launch line says nothing of H
    lora = plan_fleet(PlanRequest(model="qwen35-9b", budget=40.0), CATALOG, Signals())
    assert lora.head["rounds"]["sync_every"] == 24 and "--sync-every" not in lora.launch_command


def test_launch_without_gpu_syncs_at_the_h_its_plan_raised_unless_one_was_given(capsys):
    import argparse

    from yeto.cli.launch.plan import fleet_from_answer
    plan = plan_fleet(PlanRequest(model="org/m", weights_gb=16.0, tuning="full", budget=40.0, seq_len=1024), CATALOG,
                      Signals())
    answer, h = {"type": "FleetPlanned", "plan": plan.to_dict()}, plan.head["rounds"]["sync_every"]
    args = argparse.Namespace(model="org/m", price_margin=0.10, sync_every=None, syncers=None)
    assert len(fleet_from_answer(args, answer)) == len(plan.islands) and args.sync_every == h > 24
    assert f"syncing every {h} inner steps (--sync-every {h})" in capsys.readouterr().out
    assert args.syncers is None, "a stack of the user's (the planner service's answer) keeps its own syncers"
    given = argparse.Namespace(model="org/m", price_margin=0.10, sync_every=h + 10, syncers=None)
    fleet_from_answer(given, answer, own_head=True)     # the run's own head: the syncers its rounds need
    n = plan.head["rounds"]["syncers"]
    assert given.sync_every == h + 10 and given.syncers == n > 1
    assert f"the head runs {n} syncer processes (--syncers {n})" in capsys.readouterr().out
    mine = argparse.Namespace(model="org/m", price_margin=0.10, sync_every=None, syncers=2)
    fleet_from_answer(mine, answer, own_head=True)
    assert mine.syncers == 2


def test_a_cloud_fleet_named_with_gpu_syncs_less_often_where_no_head_keeps_up_and_a_given_h_that_lags_is_refused(capsys):
    from argparse import Namespace

    from yeto.cli.launch.cloud import head_rounds, keep_up
    from yeto.cli.launch.cloud import size_head as size_head_vm
    from yeto.schemas.commands import LaunchRun
    from yeto.schemas.launch_recipe import LaunchRecipe
    fleet = [{"cloud": "aws", "gpu": "H100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True,
              "price_per_hour": 12.0}] * 4

    def launch(tuning: str = "full", **sync) -> LaunchRun:
        recipe = LaunchRecipe.upcast({"recipe_version": 2, "train": {"model": "org/m", "data": "d", "tuning": tuning,
                                                                     "seq_len": 1024, "micro_batch": 1, "sync": sync}})
        return LaunchRun(run_id="r", fleet=fleet, recipe=recipe.wire(), source="test")
    args = Namespace(model="org/m", weights_gb=16.0, tuning="full", syncers=None, head_memory_gb=None, sync_every=None)
    lagging = head_rounds(args, launch())
    assert lagging is not None and not lagging.fits
    kept = keep_up(args, launch())
    h = LaunchRecipe.upcast(kept.recipe).train.sync.inner_steps
    assert h == inner_steps_to_fit(lagging, 24) > 24 and head_rounds(args, kept).fits
    assert f"syncing every {h} inner steps (--sync-every {h})" in capsys.readouterr().out
    rounds = head_rounds(args, kept)
    assert size_head_vm(args, kept).vm.vcpus >= min(rounds.total_cores + REST_VCPUS, HEAD_VMS[-1].vcpus)
    with pytest.raises(ValueError, match=rf"--sync-every 24: no head keeps up .*\(--sync-every {h}\)"):
        keep_up(Namespace(**{**vars(args), "sync_every": 24}), launch())
    with pytest.raises(ValueError, match="--sync-every 30: no head keeps up"):
        keep_up(args, launch(inner_steps=30))           # an H a config file set is as given
    lora_args = Namespace(**{**vars(args), "tuning": "lora"})
    assert keep_up(lora_args, launch("lora")).recipe == launch("lora").recipe        # LoRA's rounds keep up at H 24


def test_the_head_is_sized_for_the_runs_codecs_and_fragments_and_the_launch_line_carries_them(capsys):
    # Full tuning of an 8B model: f32 pushes and broadcasts (4 B a value against q4's ~0.5) need a head that holds
    # their rows and rounds that encode them; before, every plan was sized for q4 whatever --codec the launch named.
    req = dict(model="org/m", weights_gb=16.0, tuning="full", budget=40.0, seq_len=1024)
    q4 = plan_fleet(PlanRequest(**req), CATALOG, Signals())
    f32 = plan_fleet(PlanRequest(**req, codec_up="f32", codec_down="f32"), CATALOG, Signals())
    assert q4.feasible and f32.feasible and [i["gpu"] for i in q4.islands] == [i["gpu"] for i in f32.islands]
    assert f32.head["need_gb"] > 2 * q4.head["need_gb"], (f32.head, q4.head)
    assert f32.head["rounds"]["sync_every"] > q4.head["rounds"]["sync_every"]
    modelled = size_head(trainable_of(16.0, "full"), fragments=8, learners=len(f32.islands), codec_up="f32",
                         codec_down="f32", interval_s=f32.head["rounds"]["interval_s"])
    assert modelled.fits and f32.head["rounds"]["busy_s"] == pytest.approx(modelled.busy_s, rel=0.01)
    assert "--codec f32" in f32.launch_command and "--codec" not in q4.launch_command
    split = plan_fleet(PlanRequest(**req, codec_up="topk2", codec_down="q4", num_fragments=16), CATALOG, Signals())
    assert "--codec-up topk2 --codec-down q4 --fragments 16" in split.launch_command
    assert split.head["rounds"]["syncers"] <= 16
    # `yeto shape` takes the launch's flags; a codec that does not exist is refused with the ones that do
    assert main(["shape", "--model", "org/m", "--weights-gb", "16", "--tuning", "full", "--budget-per-hour", "40",
                 "--seq-len", "1024", "--catalog-dir", str(FIXTURE_DIR), "--codec", "f32"]) == 0
    assert "--codec f32" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--codec-up: .*q4"):
        PlanRequest(**req, codec_up="q3")
    with pytest.raises(ValueError, match="--fragments must be at least 1"):
        PlanRequest(**req, num_fragments=0)
