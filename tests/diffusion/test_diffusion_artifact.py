"""The finalizer's diffusion artifact: the LoRA file `pipeline.load_lora_weights` loads gives the denoiser exactly the
trained adapter's outputs, samples.png holds the prompts before and after, and the manifest signs every file."""
from __future__ import annotations

import json

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from PIL import Image

from yeto.infra import signing
from yeto.learners import accel as accel_policy
from yeto.learners.diffusion.components import build
from yeto.learners.diffusion.recipe import DiffusionRecipe
from yeto.learners.torch.adapter import TorchArrays
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.services.finalizer.artifact import write_artifact

pytestmark = pytest.mark.timeout(120)
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def written(tiny, tmp_path_factory):
    """A trained-looking adapter (random LoRA B) written by the finalizer's one entry point."""
    model = str(tiny["model"])
    built = build(DiffusionRecipe(model=model, lora_r=4, lora_alpha=8), accel=accel_policy.detect(prefer="cpu"))
    arrays, generator = TorchArrays.of(built.model), torch.Generator().manual_seed(1)
    for name in arrays.names():
        arrays.write(name, 0.1 * torch.randn(arrays.shape(name), generator=generator).numpy())
    state = {n: arrays.read(n).copy() for n in arrays.names()}
    recipe = LaunchRecipe.upcast({"model_kind": "diffusion", "train": {"model": model, "lora_r": 4, "lora_alpha": 8,
                                                                         "pins": {"base": {"id": model, "files": {}}}},
                                  "diffusion": {"resolution": 16, "sample_prompts": ["a red square", "a blue square"],
                                                "sample_steps": 2}}).wire()
    out, key = tmp_path_factory.mktemp("artifact"), Ed25519PrivateKey.generate()
    kind, files, _ = write_artifact(state, recipe=recipe, out=out, run_id="r-diff", versions={0: 3}, acked=[], key=key)
    return {"built": built, "out": out, "kind": kind, "files": files, "key": key, "model": model}


def test_load_lora_weights_gives_the_pipeline_the_trained_denoiser(written):
    from diffusers import DiffusionPipeline
    pipe = DiffusionPipeline.from_pretrained(written["model"])
    g = torch.Generator().manual_seed(0)
    x, states, t = torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 32, 32, generator=g), torch.tensor([500])
    with torch.no_grad():
        base = pipe.unet(x, t, encoder_hidden_states=states).sample
        pipe.load_lora_weights(str(written["out"] / "artifact"), weight_name="pytorch_lora_weights.safetensors")
        loaded = pipe.unet(x, t, encoder_hidden_states=states).sample
        trained = written["built"].model(x, t, encoder_hidden_states=states).sample
    assert torch.allclose(loaded, trained, atol=1e-5) and not torch.allclose(base, trained, atol=1e-3)


def test_samples_png_holds_the_prompts_before_and_after(written):
    grid = Image.open(written["out"] / "artifact" / "samples.png")
    assert grid.size == (2 * 16, 2 * 16)
    top, bottom = grid.crop((0, 0, 32, 16)).tobytes(), grid.crop((0, 16, 32, 32)).tobytes()
    assert top != bottom          # same seeds: only the adapter differs


def test_the_deployable_files_sit_in_artifact_and_the_manifest_names_and_signs_every_file(written):
    out = written["out"]
    assert sorted(p.name for p in out.iterdir()) == ["artifact", "manifest.json", signing.SIG_FILE]   # no resume/
    text = (out / "manifest.json").read_text()
    manifest = json.loads(text)
    assert written["kind"] == "adapter" and manifest["model_kind"] == "diffusion"
    assert set(manifest["files"]) == {"artifact/pytorch_lora_weights.safetensors", "artifact/samples.png",
                                      "artifact/README.md"}
    assert manifest["resume"] is None and '"<output>/artifact"' in (out / "artifact" / "README.md").read_text()
    assert set(written["files"]) == set(manifest["files"]) | {"manifest.json", signing.SIG_FILE}
    assert signing.signature_ok(signing.public_hex(written["key"]), text.encode(),
                                (out / signing.SIG_FILE).read_text().strip())


def test_a_download_of_its_hub_repo_verifies_against_the_signed_manifest(written, tmp_path, capsys):
    """An hf:// output uploads artifact/ as the repo root (output.hub_files): its download, with the Hub's own
    .gitattributes, verifies against the output folder's signed manifest (no resume state to miss); a changed file
    fails by name."""
    from yeto.cli.main import main
    from yeto.services.finalizer.output import hub_files

    plan = hub_files(written["out"])
    assert sorted(plan) == ["README.md", "manifest.json", signing.SIG_FILE, "pytorch_lora_weights.safetensors",
                            "samples.png"]
    for there, here in plan.items():
        (tmp_path / there).write_bytes((written["out"] / here).read_bytes())
    (tmp_path / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    assert main(["verify", str(tmp_path)]) == 0, capsys.readouterr().out
    (tmp_path / "samples.png").write_bytes(b"another picture")
    assert main(["verify", str(tmp_path)]) == 1
    assert "FAILED samples.png: changed" in capsys.readouterr().out


def test_the_lora_files_config_is_the_same_in_every_process(written):
    """The LoRA config in the file's header lists target_modules sorted: Diffusers wrote peft's set in its iteration
    order, which changes with each process's string hashing, so two finalizers gave two files for one adapter."""
    from safetensors import safe_open

    with safe_open(str(written["out"] / "artifact" / "pytorch_lora_weights.safetensors"), framework="pt") as f:
        config = json.loads(f.metadata()["lora_adapter_metadata"])
    modules = config["unet.target_modules"]       # Diffusers prefixes each key with the denoiser's name
    assert len(modules) > 1 and modules == sorted(modules), modules
