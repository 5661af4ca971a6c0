"""A real two-island diffusion run: `yeto launch --model-kind diffusion` starts the diffusion learner on two local
islands, the syncer merges rounds both pushed to, the finalizer writes the Diffusers LoRA and samples.png, and the
artifact loads with `pipeline.load_lora_weights` into the tiny pipeline."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from diffusion_runs import finalized_by_both
from e2e_stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
RUN = "diffusion-two"


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny):
    """One finalized run shared by the module's tests: (stack, what `yeto launch --wait` printed)."""
    s = Stack(tmp_path_factory.mktemp("diffusion-run") / "home", tiny["model"], tiny["data"])
    try:   # inside: a launch that fails half way still has its stack taken down
        s.launch(RUN, "--model-kind", "diffusion", "--resolution", "16", "--micro-batch", "4", "--max-steps", "16",
                 "--sync-every", "4", "--lr", "1e-2", train_flags=("--fragments", "2", "--warmup-steps", "2"))
        yield s, s.finish(RUN, timeout=240)
    finally:
        s.down()


def test_both_islands_push_to_merged_rounds_and_the_run_finalizes(run):
    s, output = run
    finalized_by_both(s, RUN, output)


def test_the_artifact_loads_into_the_pipeline_with_load_lora_weights(run, tiny):
    from diffusers import DiffusionPipeline
    s, _ = run
    (written,) = s.events(RUN, "ArtifactWritten")
    artifact = Path(written["local_path"]) / "artifact"      # the deployable folder (schemas/artifact_layout.py)
    pipe = DiffusionPipeline.from_pretrained(str(tiny["model"]))
    g = torch.Generator().manual_seed(0)
    x, states, t = torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 32, 32, generator=g), torch.tensor([500])
    with torch.no_grad():
        base = pipe.unet(x, t, encoder_hidden_states=states).sample
        pipe.load_lora_weights(str(artifact), weight_name="pytorch_lora_weights.safetensors")
        tuned = pipe.unet(x, t, encoder_hidden_states=states).sample
    assert not torch.allclose(base, tuned, atol=1e-4)          # the merged adapter moved the denoiser
    assert Image.open(artifact / "samples.png").size == (3 * 16, 2 * 16)   # the default prompts, before and after
