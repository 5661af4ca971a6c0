"""The strict-resume comparison (schemas/lineage.py): every field a resume may not change is refused by name with
both values and what to do; what a resume may change passes; a branch only keeps what the weights depend on."""
from __future__ import annotations

import pytest

from yeto.schemas.lineage import SAFE_TRAIN, STRICT_SYNC, WEIGHT_FIELDS, compare, key_of, refusal

TRAIN = {"model": "/m/tiny", "data": "/d/chat.jsonl", "data_format": "auto", "train_on": "assistant", "tuning": "lora",
         "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": [], "lr": 3e-4, "weight_decay": 0.01,
         "betas": [0.9, 0.95], "warmup_steps": 20, "schedule": "cosine", "min_lr_ratio": 0.1, "max_steps": 100,
         "clip_norm": 1.0, "micro_batch": 4, "grad_accum": 1, "seq_len": 128, "seed": 0, "dtype": "auto",
         "heldout_fraction": 0.05, "base_quantization": "none", "shard": "auto", "activation_checkpointing": "auto",
         "field_map": {}, "eval_every": 0, "eval_data": "",
         "sync": {"num_fragments": 2, "outer_lr": 0.7, "momentum": 0.9, "merge": "rda", "inner_steps": 8},
         "pins": {"base": {"id": "/m/tiny", "revision": None, "files": {"model.safetensors": "aa" * 32}}}}
RECIPE = {"train": TRAIN, "data_check": {"fingerprint": "f" * 64}, "limits": {"max_steps": 100}}


def key(recipe=RECIPE, tok="t" * 64, chat="c" * 64) -> dict:
    return key_of(recipe, tokenizer_sha256=tok, chat_template_sha256=chat)


def changed(**train) -> dict:
    sync = train.pop("sync", {})
    return {**RECIPE, "train": {**TRAIN, **train, "sync": {**TRAIN["sync"], **sync}}}


OTHER = {"data_format": "openai", "train_on": "all", "tuning": "full", "lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.1,
         "target_modules": ["q_proj"], "lr": 1e-3, "weight_decay": 0.0, "betas": [0.9, 0.99], "warmup_steps": 5,
         "schedule": "constant", "min_lr_ratio": 0.2, "clip_norm": 0.5, "micro_batch": 8, "grad_accum": 2,
         "seq_len": 256, "seed": 1, "dtype": "f32", "heldout_fraction": 0.1, "base_quantization": "nf4",
         "field_map": {"messages": "conversation"}}


@pytest.mark.parametrize("name", sorted(OTHER))
def test_every_train_field_but_max_steps_is_refused_by_name_with_both_values(name):
    (m,) = compare(key(), key(changed(**{name: OTHER[name]})), "resume")
    assert (m.field, m.parent, m.child) == (f"train.{name}", TRAIN[name], OTHER[name])
    text = refusal([m], "resume", "r-parent")
    assert f"train.{name}: r-parent has {TRAIN[name]!r}, this launch {OTHER[name]!r}" in text
    assert "--branch-from r-parent" in text


def test_every_recipe_field_of_a_train_recipe_is_covered():
    from yeto.learners.lm_recipe import TrainRecipe

    fields = set(TrainRecipe(model="m", data="d").to_dict()) - {"model", "data", "pins", "start_step", "sync"}
    assert fields - SAFE_TRAIN == set(OTHER), "a new recipe field: decide whether a resume may change it"


@pytest.mark.parametrize("name, value", [("num_fragments", 4), ("outer_lr", 0.5), ("momentum", 0.8), ("merge", "avg")])
def test_the_sync_settings_that_shape_theta_and_momentum_are_refused(name, value):
    assert name in STRICT_SYNC
    (m,) = compare(key(), key(changed(sync={name: value})), "resume")
    assert (m.field, m.parent, m.child) == (f"sync.{name}", TRAIN["sync"][name], value)


@pytest.mark.parametrize("field, child", [
    ("base_model", changed(model="/m/other")),
    ("base_revision", changed(pins={"base": {"revision": "b" * 40, "files": TRAIN["pins"]["base"]["files"]}})),
    ("base_files", changed(pins={"base": {"revision": None, "files": {"model.safetensors": "bb" * 32}}})),
    ("data_fingerprint", {**RECIPE, "data_check": {"fingerprint": "0" * 64}}),
])
def test_base_and_data_are_refused(field, child):
    parent = key(changed(pins={"base": {"revision": "a" * 40, "files": TRAIN["pins"]["base"]["files"]}})) \
        if field == "base_revision" else key()
    assert [m.field for m in compare(parent, key(child), "resume")] == [field]


def test_tokenizer_and_chat_template_are_refused_and_not_compared_when_unknown():
    assert [m.field for m in compare(key(), key(tok="u" * 64), "resume")] == ["tokenizer_sha256"]
    assert [m.field for m in compare(key(), key(chat="d" * 64), "resume")] == ["chat_template_sha256"]
    assert compare(key(), key(tok=None, chat=None), "resume") == []     # a Hub model's tokenizer not downloaded


def test_a_sync_setting_not_given_is_its_default():
    bare = changed(sync={})
    bare["train"]["sync"] = {"num_fragments": 2}              # outer_lr, momentum, merge: the defaults
    assert compare(key(bare), key(changed(sync={"outer_lr": 0.7})), "resume") == []
    assert [m.field for m in compare(key(bare), key(changed(sync={"outer_lr": 0.5})), "resume")] == ["sync.outer_lr"]


def test_what_a_resume_may_change_passes():
    child = {**changed(max_steps=400, data="/elsewhere/chat.jsonl", start_step=100, shard="fsdp", activation_checkpointing="on",
                       sync={"inner_steps": 16, "quorum": 2, "seed": "/a/artifact", "seed_momentum": True}),
             "limits": {"max_steps": 400, "max_spend": 3.0}, "output": "s3://b/x"}
    assert compare(key(), key(child), "resume") == []


def test_a_branch_keeps_only_what_the_weights_depend_on():
    other_run = changed(lr=1e-3, schedule="constant", seed=3, max_steps=20, seq_len=64)
    assert compare(key(), key({**other_run, "data_check": {"fingerprint": "0" * 64}}), "branch") == []
    assert [m.field for m in compare(key(), key(changed(lora_r=8)), "branch")] == ["train.lora_r"]
    assert [m.field for m in compare(key(), key(changed(sync={"num_fragments": 4})), "branch")] == ["sync.num_fragments"]
    assert set(WEIGHT_FIELDS) <= set(key())
    assert "same --model, --lora-r and --fragments" in refusal(compare(key(), key(changed(lora_r=8)), "branch"), "branch", "r-p")
