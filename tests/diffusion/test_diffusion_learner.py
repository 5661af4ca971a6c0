"""The diffusion learner in process: its recipe reads the launch recipe's sections, LoRA starts identical on every
island, the objective follows the scheduler, training lowers the held-out denoising loss, and the data contract."""
from __future__ import annotations

import json

import pytest
import torch

from yeto.learners import accel as accel_policy
from yeto.learners.diffusion import media, objective
from yeto.learners.diffusion.components import build
from yeto.learners.diffusion.loop import noise_generator, train
from yeto.learners.diffusion.recipe import ATTENTION, DiffusionRecipe
from yeto.learners.torch.tuning import state_hash, trainable_parameters
from yeto.schemas.launch_recipe import LaunchRecipe

pytestmark = pytest.mark.timeout(120)
torch.set_num_threads(1)    # two threads on a shared 2-core host run the tiny UNet ~40x slower (oversubscription)
CPU = accel_policy.detect(prefer="cpu")


def recipe(tiny, **changes) -> DiffusionRecipe:
    fields = dict(model=str(tiny["model"]), data=str(tiny["data"]), resolution=16, micro_batch=4, lr=1e-2,
                  warmup_steps=0, schedule="constant", heldout_fraction=0.25, max_steps=20)
    return DiffusionRecipe(**{**fields, **changes})


def test_the_learner_reads_the_launch_recipes_train_and_diffusion_sections():
    launch = LaunchRecipe.upcast({"model_kind": "diffusion", "train": {"model": "m", "lora_r": 8},
                                  "diffusion": {"resolution": 64, "sample_prompts": ["a cat"]}})
    read = DiffusionRecipe.from_dict(json.loads(json.dumps(launch.learner_recipe())))   # recipe.json
    assert (read.model, read.lora_r, read.resolution, read.sample_prompts) == ("m", 8, 64, ("a cat",))
    assert launch.learner_module == "yeto.learners.diffusion" and LaunchRecipe().learner_module == "yeto.learners.torch"
    with pytest.raises(ValueError, match="unknown diffusion recipe field"):
        DiffusionRecipe.from_dict({"model": "m", "resolutoin": 64})
    with pytest.raises(ValueError, match="multiple of 8"):
        DiffusionRecipe(model="m", resolution=100)


def test_lora_on_the_denoiser_alone_seeded_identically_on_every_island(tiny):
    a, b, other = build(recipe(tiny), accel=CPU), build(recipe(tiny), accel=CPU), build(recipe(tiny, seed=1), accel=CPU)
    names = [n for n, _ in trainable_parameters(a.model)]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    wrapped = {n.split(".lora_")[0] for n in names}
    assert all(w.endswith(ATTENTION) for w in wrapped) and all(any(w.endswith(t) for w in wrapped) for t in ATTENTION)
    assert not any(p.requires_grad for m in (a.vae, a.text_encoder) for p in m.parameters())
    assert state_hash(a.model) == state_hash(b.model) != state_hash(other.model)


def test_training_lowers_the_heldout_denoising_loss(tiny):
    r = recipe(tiny)
    built = build(r, accel=CPU)
    items, heldout = media.split_items(r)
    batches = [media.batch(heldout, r)]
    before = objective.heldout_loss(built, batches)
    assert objective.heldout_loss(built, batches) == before          # fixed timesteps and noise: repeatable
    results = train(built, media.train_batches(items, r, shard=0, num_shards=1), r, generator=noise_generator(r, 0))
    assert [x.step for x in results] == list(range(1, 21)) and all(x.tokens == 4 for x in results)
    assert objective.heldout_loss(built, batches) < 0.95 * before


def test_the_objective_follows_the_scheduler_epsilon_v_or_flow(tiny, tmp_path):
    from diffusers import FlowMatchEulerDiscreteScheduler

    from yeto.learners.diffusion.tiny import write_tiny_pipeline
    assert build(recipe(tiny), accel=CPU).objective == "epsilon"
    v_model = write_tiny_pipeline(tmp_path / "v", prediction_type="v_prediction")
    assert build(recipe(tiny, model=str(v_model)), accel=CPU).objective == "v_prediction"
    FlowMatchEulerDiscreteScheduler().save_pretrained(v_model / "scheduler")
    flow = build(recipe(tiny, model=str(v_model)), accel=CPU)
    pixels, captions = media.batch(media.split_items(recipe(tiny))[0][:2], recipe(tiny))
    loss = objective.loss(flow, pixels, captions, torch.Generator().manual_seed(0))
    assert flow.objective == "flow" and torch.isfinite(loss) and loss.requires_grad


def test_images_are_split_cropped_and_sharded_and_video_rows_refused(tiny, tmp_path):
    r = recipe(tiny)
    items, heldout = media.split_items(r)
    assert (len(items), len(heldout)) == (18, 6)
    pixels, captions = media.batch(items[:2], r.replace(resolution=8))
    assert pixels.shape == (2, 3, 8, 8) and -1 <= pixels.min() and pixels.max() <= 1 and captions[0].startswith("a ")
    first = next(media.train_batches(items, r, shard=1, num_shards=2))[1]
    assert set(first) <= {i.caption for i in items[1::2]}
    with pytest.raises(ValueError, match="fewer than micro_batch"):
        next(media.train_batches(items, r.replace(micro_batch=10), shard=0, num_shards=2))
    (tmp_path / "clip.mp4").write_bytes(b"\0")
    (tmp_path / "metadata.jsonl").write_text(json.dumps({"file_name": "clip.mp4", "text": "a clip"}) + "\n")
    with pytest.raises(ValueError, match="video row.*give --frames N"):
        media.split_items(r.replace(data=str(tmp_path)))


def test_a_base_other_than_the_pinned_one_or_one_it_cannot_train_is_refused_by_name(tiny, tmp_path):
    from yeto.learners.diffusion.components import model_folder
    with pytest.raises(ValueError, match="refusing a base model other than the one the run pinned"):
        model_folder(str(tiny["model"]), {"files": {"unet/config.json": "0" * 64}})
    for name, says in (("FluxKontextPipeline", "Flux Kontext"), ("StableDiffusionXLPipeline", "SDXL")):
        (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": name, "transformer": []}))
        with pytest.raises(ValueError, match=f"{says} .*is not supported yet; the diffusion learner trains sd "):
            build(recipe(tiny, model=str(tmp_path)), accel=CPU)
    (tmp_path / "model_index.json").write_text(json.dumps({"unet": [], "text_encoder_2": []}))
    with pytest.raises(ValueError, match="without _class_name is not supported yet"):
        build(recipe(tiny, model=str(tmp_path)), accel=CPU)
    with pytest.raises(ValueError, match="--frames 9: sd is an image family"):
        build(recipe(tiny, frames=9), accel=CPU)


def test_the_learner_process_trains_alone_with_held_out_evaluations_and_exits_2_on_a_bad_recipe(tiny, capsys,
                                                                                                monkeypatch):
    from yeto.learners.diffusion.__main__ import main
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    text = json.dumps(recipe(tiny, max_steps=4).to_dict())
    assert main(["--run-id", "r", "--learner", "island-0", "--recipe", text, "--no-sync", "--eval-every", "2",
                 "--log-every-s", "0"]) == 0
    out = capsys.readouterr().out
    assert out.count("heldout") == 3 and "done: steps 4" in out, out          # steps 2 and 4, and the end
    assert out.startswith("start: diffusion on cpu, 1 rank on one process, lora tuning in float32"), out
    assert main(["--run-id", "r", "--learner", "island-0", "--recipe", json.dumps({"model": "m", "resolution": 7}),
                 "--no-sync"]) == 2
