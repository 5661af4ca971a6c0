"""Real two-island runs of the transformer families: `yeto launch --model-kind diffusion` on tiny SD3 and Flux
pipelines with images, and on tiny LTX-Video and Wan pipelines with clips (`--frames 9`, 32 x 32): the syncer
merges rounds both islands pushed to, the finalizer writes the Diffusers LoRA and the before/after samples (a frame
strip per video prompt), and the artifact loads with `pipeline.load_lora_weights`. The four runs share one local
stack (the first launch starts it; a run is one more `yeto launch --wait` on it), as a user's runs do."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from diffusion_runs import finalized_by_both
from e2e_stack import Stack
from yeto.infra import stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
FLAGS = ("--model-kind", "diffusion", "--micro-batch", "2", "--max-steps", "12", "--sync-every", "4", "--lr", "1e-2")
TRAIN = ("--fragments", "2", "--warmup-steps", "2")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The YETO_HOME of the module's runs; its stack goes down after the last of them, even one that failed."""
    home = tmp_path_factory.mktemp("dit-runs") / "home"
    yield home
    stack.down(home)


def _run(home: Path, name: str, model: Path, data: Path, *flags: str):
    s = Stack(home, model, data)
    try:
        s.launch(name, *FLAGS, *flags, train_flags=TRAIN)
        yield s, s.finish(name, timeout=360)
    finally:   # a launch that failed half way is not left waiting (the stack itself goes down with `home`)
        s.stop_launches()


@pytest.fixture(scope="module")
def sd3_run(home, tiny, tiny_sd3):
    yield from _run(home, "sd3-two", tiny_sd3, tiny["data"], "--resolution", "16")


@pytest.fixture(scope="module")
def flux_run(home, tiny, tiny_flux):
    yield from _run(home, "flux-two", tiny_flux, tiny["data"], "--resolution", "16")


@pytest.fixture(scope="module")
def wan_run(home, tiny_wan, tiny_ltx):
    yield from _run(home, "wan-two", tiny_wan, tiny_ltx["data"], "--frames", "9", "--resolution", "32")


@pytest.fixture(scope="module")
def ltx_run(home, tiny_ltx):
    yield from _run(home, "ltx-two", tiny_ltx["model"], tiny_ltx["data"], "--frames", "9", "--height", "32",
                    "--width", "32")


def _moved_by_the_artifact(model: Path, artifact: Path, **inputs) -> bool:
    from diffusers import DiffusionPipeline
    pipe = DiffusionPipeline.from_pretrained(str(model))
    with torch.no_grad():
        base = pipe.transformer(**inputs, return_dict=False)[0]
        pipe.load_lora_weights(str(artifact), weight_name="pytorch_lora_weights.safetensors")
        assert any("lora" in n for n, _ in pipe.transformer.named_parameters())
        tuned = pipe.transformer(**inputs, return_dict=False)[0]
    return not torch.allclose(base, tuned, atol=1e-4)


def test_an_sd3_run_on_two_islands_finalizes_and_its_artifact_loads(sd3_run, tiny_sd3):
    s, output = sd3_run
    artifact = finalized_by_both(s, "sd3-two", output)
    g = torch.Generator().manual_seed(0)
    assert _moved_by_the_artifact(tiny_sd3, artifact, hidden_states=torch.randn(1, 4, 16, 16, generator=g),
                                  timestep=torch.tensor([500.0]), encoder_hidden_states=torch.randn(1, 8, 64, generator=g),
                                  pooled_projections=torch.randn(1, 64, generator=g))
    assert Image.open(artifact / "samples.png").size == (3 * 16, 2 * 16)   # the default prompts, before and after


def test_a_flux_run_on_two_islands_finalizes_and_its_artifact_loads(flux_run, tiny_flux):
    s, output = flux_run
    artifact = finalized_by_both(s, "flux-two", output)
    g = torch.Generator().manual_seed(0)
    ids = torch.zeros(64, 3)
    ids[:, 1], ids[:, 2] = torch.arange(64) // 8, torch.arange(64) % 8
    assert _moved_by_the_artifact(tiny_flux, artifact, hidden_states=torch.randn(1, 64, 16, generator=g),
                                  timestep=torch.tensor([0.5]), encoder_hidden_states=torch.randn(1, 8, 32, generator=g),
                                  pooled_projections=torch.randn(1, 32, generator=g), txt_ids=torch.zeros(8, 3),
                                  img_ids=ids, guidance=None)
    assert Image.open(artifact / "samples.png").size == (3 * 16, 2 * 16)


def test_an_ltx_video_run_on_two_islands_trains_on_clips_finalizes_and_its_artifact_loads(ltx_run, tiny_ltx):
    s, output = ltx_run
    artifact = finalized_by_both(s, "ltx-two", output)
    (launch,) = s.events("ltx-two", "RunLaunched")     # the LaunchRun recipe, as the launcher took it
    assert {k: launch["recipe"]["diffusion"][k] for k in ("frames", "height", "width")} == dict(frames=9, height=32,
                                                                                               width=32)
    g = torch.Generator().manual_seed(0)
    assert _moved_by_the_artifact(tiny_ltx["model"], artifact, hidden_states=torch.randn(1, 3 * 8 * 8, 8, generator=g),
                                  timestep=torch.tensor([500.0]), encoder_hidden_states=torch.randn(1, 8, 32, generator=g),
                                  encoder_attention_mask=torch.ones(1, 8), num_frames=3, height=8, width=8)
    assert Image.open(artifact / "samples.png").size == (3 * 9 * 32, 2 * 32)   # a 9-frame strip per prompt, twice


def test_a_wan_run_on_two_islands_trains_on_clips_finalizes_and_its_artifact_loads(wan_run, tiny_wan):
    s, output = wan_run
    artifact = finalized_by_both(s, "wan-two", output)
    g = torch.Generator().manual_seed(0)
    assert _moved_by_the_artifact(tiny_wan, artifact, hidden_states=torch.randn(1, 16, 3, 4, 4, generator=g),
                                  timestep=torch.tensor([500.0]), encoder_hidden_states=torch.randn(1, 8, 32, generator=g))
    assert Image.open(artifact / "samples.png").size == (3 * 9 * 32, 2 * 32)
