"""Transformer (DiT) families in process: LoRA on the SD3, Flux, LTX-Video and Wan denoisers, seeded alike on every
island, trained on flow matching through the pipeline's own encoders and VAE; the video data contract (clips
sampled to frames x height x width, bad rows named); and the finalizer's artifact that `load_lora_weights` loads."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from PIL import Image

from yeto.cli.launch.diffusion import check_media
from yeto.learners import accel as accel_policy
from yeto.learners.diffusion import families, family_io, media, objective
from yeto.learners.diffusion.components import build
from yeto.learners.diffusion.loop import noise_generator, train
from yeto.learners.diffusion.recipe import DiffusionRecipe
from yeto.learners.torch.adapter import TorchArrays
from yeto.learners.torch.tuning import state_hash, trainable_parameters
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.services.finalizer.artifact import write_artifact

pytestmark = pytest.mark.timeout(180)
torch.set_num_threads(1)
CPU = accel_policy.detect(prefer="cpu")
FAMILIES = ["sd3", "flux", "ltx-video", "wan"]


@pytest.fixture(scope="module")
def cases(tiny, tiny_sd3, tiny_flux, tiny_ltx, tiny_wan) -> dict[str, DiffusionRecipe]:
    shared = dict(micro_batch=4, lr=1e-2, warmup_steps=0, schedule="constant", heldout_fraction=0.25, max_steps=20)
    return {"sd3": DiffusionRecipe(model=str(tiny_sd3), data=str(tiny["data"]), resolution=16, **shared),
            "flux": DiffusionRecipe(model=str(tiny_flux), data=str(tiny["data"]), resolution=16, **shared),
            "ltx-video": DiffusionRecipe(model=str(tiny_ltx["model"]), data=str(tiny_ltx["data"]), resolution=32,
                                         frames=9, **shared),
            "wan": DiffusionRecipe(model=str(tiny_wan), data=str(tiny_ltx["data"]), resolution=32, frames=9, **shared)}


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_on_the_transformer_alone_seeded_identically_on_every_island(cases, family):
    r = cases[family]
    a, b, other = build(r, accel=CPU), build(r, accel=CPU), build(r.replace(seed=1), accel=CPU)
    assert a.family.name == family and a.objective == "flow" and a.model is a.pipe.transformer
    names = [n for n, _ in trainable_parameters(a.model)]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in names} | {"to_out.0"} >= {"to_q", "to_k", "to_v"}
    frozen = [m for name, m in a.pipe.components.items() if isinstance(m, torch.nn.Module) and name != "transformer"]
    assert frozen and not any(p.requires_grad for m in frozen for p in m.parameters())
    assert state_hash(a.model) == state_hash(b.model) != state_hash(other.model)


@pytest.mark.slow      # 20 real steps per family through the pipeline's encoders and VAE
@pytest.mark.parametrize("family", FAMILIES)
def test_training_lowers_the_heldout_flow_matching_loss(cases, family):
    r = cases[family]
    built = build(r, accel=CPU)
    items, heldout = media.split_items(r)
    batches = [media.batch(heldout, r)]
    before = objective.heldout_loss(built, batches)
    assert objective.heldout_loss(built, batches) == before
    results = train(built, media.train_batches(items, r, shard=0, num_shards=1), r, generator=noise_generator(r, 0))
    assert [x.step for x in results] == list(range(1, 21))
    assert objective.heldout_loss(built, batches) < 0.95 * before


def test_clips_are_sampled_to_frames_height_width_and_bad_rows_are_named(cases, tiny, tmp_path):
    r = cases["ltx-video"]
    items, heldout = media.split_items(r)
    assert (len(items), len(heldout)) == (12, 4)
    clips, captions = media.batch(items[:2], r.replace(height=32, width=64))
    assert clips.shape == (2, 3, 9, 32, 64) and -1 <= clips.min() and clips.max() <= 1 and "moving" in captions[0]
    first, last = media.clip(items[0], 2, 32, 32).unbind(1)        # the square moved between first and last frame
    assert not torch.equal(first, last)
    with pytest.raises(ValueError, match="fewer than --frames 13"):
        media.split_items(r.replace(frames=13))                    # the clips have 12 frames
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "ok.mp4").write_bytes(Path(items[0].path).read_bytes())
    (folder / "junk.mp4").write_bytes(b"\0" * 64)
    Image.new("RGB", (8, 8)).save(folder / "still.png")
    rows = [{"file_name": n, "text": "x"} for n in ("ok.mp4", "junk.mp4", "still.png")]
    (folder / "metadata.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    with pytest.raises(ValueError, match=r"2 bad clip row\(s\): junk.mp4: not a readable video.*still.png: an image"):
        media.split_items(r.replace(data=str(folder)))
    launch = SimpleNamespace(data=str(folder), frames=9, on_bad_rows="error")      # `yeto launch`, before it starts
    with pytest.raises(ValueError, match=r"2 bad clip row\(s\):\n  junk.mp4: not a readable video.*\n  still.png: an image"):
        check_media(launch)
    with pytest.raises(ValueError, match="2 video row.*give --frames N"):
        check_media(SimpleNamespace(data=str(folder), frames=None, on_bad_rows="error"))
    assert check_media(SimpleNamespace(data=r.data, frames=9, on_bad_rows="error"))["formats"] == {"video": 16}
    with pytest.raises(ValueError, match="--frames 8: ltx-video takes 4k \\+ 1 frames"):
        build(r.replace(frames=8), accel=CPU)
    with pytest.raises(ValueError, match="--height 16 --width 16: ltx-video takes multiples of 32"):
        build(r.replace(resolution=16), accel=CPU)
    with pytest.raises(ValueError, match="--height 40 --width 40: wan takes multiples of 16"):
        build(cases["wan"].replace(resolution=40), accel=CPU)
    with pytest.raises(ValueError, match="--frames 9: sd3 is an image family"):
        build(cases["sd3"].replace(frames=9), accel=CPU)
    assert families.family_of(r.model).video and not families.family_of(cases["sd3"].model).video


def _artifact(r: DiffusionRecipe, out):
    """A trained-looking adapter (random LoRA B) written by the finalizer, and the learner's denoiser holding it."""
    built = build(r, accel=CPU)
    arrays, generator = TorchArrays.of(built.model), torch.Generator().manual_seed(1)
    for name in arrays.names():
        arrays.write(name, 0.1 * torch.randn(arrays.shape(name), generator=generator).numpy())
    state = {n: arrays.read(n).copy() for n in arrays.names()}
    section = {"resolution": r.resolution, "frames": r.frames, "sample_prompts": ["a red square", "a blue square"],
               "sample_steps": 2}
    recipe = LaunchRecipe.upcast({"model_kind": "diffusion", "diffusion": section,
                                  "train": {"model": r.model, "lora_r": r.lora_r, "lora_alpha": r.lora_alpha,
                                            "pins": {"base": {"id": r.model, "files": {}}}}}).wire()
    write_artifact(state, recipe=recipe, out=out, run_id="r-dit", versions={0: 1}, acked=[],
                   key=Ed25519PrivateKey.generate())
    return built


@pytest.mark.parametrize("family", FAMILIES)
def test_load_lora_weights_gives_the_pipeline_the_trained_transformer_and_samples_show_before_and_after(
        cases, family, tmp_path):
    from diffusers import DiffusionPipeline
    r = cases[family]
    built = _artifact(r, tmp_path)
    pipe = DiffusionPipeline.from_pretrained(r.model)
    items = media.split_items(r)[1][:1]
    pixels, captions = media.batch(items, r)
    g = torch.Generator().manual_seed(0)
    lat = family_io.latents(built, pixels, g)
    noisy, t = torch.randn(lat.shape, generator=g), torch.tensor([500])
    cond = family_io.condition(built, captions)
    with torch.no_grad():
        base = family_io.predict(replace(built, model=pipe.transformer), noisy, t, cond)
        pipe.load_lora_weights(str(tmp_path / "artifact"), weight_name="pytorch_lora_weights.safetensors")
        loaded = family_io.predict(replace(built, model=pipe.transformer), noisy, t, cond)
        trained = family_io.predict(built, noisy, t, cond)
    assert torch.allclose(loaded, trained, atol=1e-5) and not torch.allclose(base, trained, atol=1e-3)
    grid = Image.open(tmp_path / "artifact" / "samples.png")
    side = r.resolution
    assert grid.size == (2 * r.frames * side, 2 * side)    # two prompts, before (top) and after; a clip: its frames
    assert grid.crop((0, 0, grid.width, side)).tobytes() != grid.crop((0, side, grid.width, 2 * side)).tobytes()
    assert json.loads((tmp_path / "manifest.json").read_text())["model_kind"] == "diffusion"


def test_a_two_expert_wan_pipeline_is_refused_by_name(tiny_wan, tiny_ltx, tmp_path):
    from diffusers import WanPipeline
    pipe = WanPipeline.from_pretrained(str(tiny_wan))
    two = WanPipeline(**{**pipe.components, "transformer_2": pipe.transformer}, boundary_ratio=0.9)
    two.save_pretrained(tmp_path)
    r = DiffusionRecipe(model=str(tmp_path), data=str(tiny_ltx["data"]), resolution=32, frames=9)
    with pytest.raises(ValueError, match="two-expert Wan 2.2 pipeline .transformer_2. is not supported yet"):
        build(r, accel=CPU)


def test_yeto_launch_refuses_a_pipeline_it_cannot_train_before_anything_starts(tiny, tmp_path):
    from yeto.cli.launch.diffusion import sections

    def launch(model, frames):
        args = SimpleNamespace(model=str(model), data=str(tiny["data"]), resolution=16, height=None, width=None,
                               frames=frames)
        return sections(args, {"model": str(model), "data": str(tiny["data"])})

    with pytest.raises(ValueError, match="--frames 9: sd is an image family"):
        launch(tiny["model"], 9)
    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "FluxKontextPipeline"}))
    with pytest.raises(ValueError, match="Flux Kontext .*is not supported yet"):
        launch(tmp_path, None)
    assert launch(tiny["model"], None)[1] == {"resolution": 16}
