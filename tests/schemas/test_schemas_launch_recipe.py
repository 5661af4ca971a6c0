"""The typed launch recipe (schemas/launch_recipe.py): a version-1 LaunchRun recorded from the code before it still
parses, upcasts and replays into every service's reading; the v2 wire form round-trips; bad and unknown keys are
refused by name; the train section is the learner's TrainRecipe, field for field."""
from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from yeto.learners import lm_recipe as learner_recipe
from yeto.schemas import parse
from yeto.schemas.commands import LaunchRun
from yeto.schemas.fleet import RunLaunched
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.train_section import TrainSection

pytestmark = pytest.mark.timeout(30)
# `yeto launch --gpu local:1xcpu --seq-len 64 --max-steps 30 --max-spend 2 --max-time 1h --fragments 2 --sync-every 4
#  --output /tmp/out --lora-r 8 --on-bad-rows skip --recover-timeout 5m --eval-every 5`, built by commit ae97703
RECORDED = Path(__file__).with_name("launch_run_v1_recorded.json")


def test_a_recorded_version_1_launch_parses_upcasts_and_replays_into_each_services_reading():
    from yeto.services.finalizer.budget import Limits
    from yeto.services.launcher.logic import setting
    from yeto.services.syncer import runs

    cmd = parse(RECORDED.read_bytes())
    assert isinstance(cmd, LaunchRun) and "recipe_version" not in cmd.recipe
    r = LaunchRecipe.upcast(cmd.recipe)
    assert (r.train.lora_r, r.train.seq_len, r.train.max_steps, r.train.eval_every) == (8, 64, 30, 5)
    assert (r.limits.max_spend, r.limits.max_time_s, r.output, r.timeouts.recover_timeout_s) == (2.0, 3600.0, "/tmp/out", 300.0)
    assert r.data_check.on_bad_rows == "skip" and r.config["lora_r"] == 8 and r.prices.head_price_per_hour == 0.0
    launched = cmd.caused(RunLaunched, fleet=cmd.fleet, recipe=cmd.recipe, source="launcher")
    info = runs.evolve(runs.SyncerState(), launched).runs[cmd.run_id]
    assert (SyncConfig.from_dict(info.sync).num_fragments, info.tokens_per_step) == (2, 1 * 1 * 64)
    assert setting(cmd.recipe, "recover_timeout_s") == 300.0 and Limits.from_recipe(cmd.recipe).max_spend == 2.0
    learner = learner_recipe.TrainRecipe.from_dict(r.train.learner_recipe())    # what a learner started now would read
    assert (learner.lora_r, learner.sync["inner_steps"], learner.on_bad_rows) == (8, 4, "skip")   # v1: data_check's


def test_the_wire_form_is_version_2_and_round_trips():
    r = LaunchRecipe.upcast(parse(RECORDED.read_bytes()).recipe)
    wire = r.wire()
    assert wire["recipe_version"] == 2 and json.loads(json.dumps(wire)) == wire
    assert LaunchRecipe.upcast(wire) == r and LaunchRun(run_id="r-x", fleet=[], recipe=wire).recipe == wire
    with pytest.raises(ValidationError):
        r.train.lr = 1.0                     # frozen: a recipe is changed only through updated(), validated again
    assert r.updated(bus_url="tls://203.0.113.7:4222", train={"max_steps": 9}).train.max_steps == 9


@pytest.mark.parametrize("recipe, says", [
    ({"recipe_version": 2, "trian": {}}, "trian: unknown key"),
    ({"recipe_version": 2, "train": {"lr": "0.1"}}, "train.lr: Input should be a valid number"),
    ({"recipe_version": 2, "train": {"sync": {"merge": "sum"}}}, "merge must be one of rda, avg"),
    ({"recipe_version": 2, "train": {"sync": {"fragments": 2}}}, "train.sync.fragments: unknown key"),
    ({"recipe_version": 2, "limits": {"max_spend": -1}}, "limits.max_spend"),
    ({"head_price": 1}, "head_price: unknown key(s) of a version-1 recipe"),
    ({"recipe_version": 3}, "recipe_version 3: this Yeto reads versions 1 and 2"),
])
def test_bad_and_unknown_keys_are_refused_by_name_and_at_parse(recipe, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        LaunchRecipe.upcast(recipe)
    with pytest.raises(ValidationError):
        LaunchRun(run_id="r-x", fleet=[], recipe=recipe)


def test_the_train_section_is_the_learners_train_recipe_field_for_field():
    learner = {f.name: f for f in dataclasses.fields(learner_recipe.TrainRecipe)}
    assert set(TrainSection.model_fields) == set(learner), "TrainSection and TrainRecipe must name the same fields"
    defaults = TrainSection()
    for name, f in learner.items():
        if name in ("model", "sync"):   # model: required by the learner; sync: SyncConfig's defaults, generated
            continue
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default   # type: ignore[misc]
        assert getattr(defaults, name) == default, f"default of {name}"
    for name, choices in learner_recipe._CHOICES.items():
        assert set(typing.get_args(TrainSection.model_fields[name].annotation)) == set(choices), name
