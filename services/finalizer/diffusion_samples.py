"""samples.png of a diffusion artifact: the recipe's prompts sampled with the base pipeline (top row) and with the
run's LoRA loaded (bottom row), same seeds, few inference steps: the adapter's effect at a glance."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from yeto.schemas.diffusion_section import DiffusionSection

WEIGHTS = "pytorch_lora_weights.safetensors"
"""The LoRA file of a diffusion artifact (Diffusers' default name)."""

GRID = "samples.png"
SEED = 0


def base_location(train: dict[str, Any]) -> str:
    """Where the base pipeline loads from here: the local folder, else the Hub id."""
    path = Path(str(train.get("model", ""))).expanduser()
    return str(path.resolve()) if path.is_dir() else str(train.get("model", ""))


def _images(pipe, section: DiffusionSection) -> list:
    import torch
    return [pipe(prompt, num_inference_steps=section.sample_steps, height=section.resolution, width=section.resolution,
                 generator=torch.Generator().manual_seed(SEED + i), output_type="pil").images[0]
            for i, prompt in enumerate(section.sample_prompts)]


def sample_grid(base: str, out: Path, section: DiffusionSection) -> list[str]:
    """Write samples.png into `out` (beside the LoRA file it loads); [] when the recipe names no prompts."""
    if not section.sample_prompts:
        return []
    from diffusers import DiffusionPipeline
    from PIL import Image

    pipe = DiffusionPipeline.from_pretrained(base)
    pipe.set_progress_bar_config(disable=True)
    before = _images(pipe, section)
    pipe.load_lora_weights(str(out), weight_name=WEIGHTS)   # by name: offline, diffusers < 0.42 asks for it
    after = _images(pipe, section)
    size = section.resolution
    grid = Image.new("RGB", (size * len(before), size * 2))
    for col, (a, b) in enumerate(zip(before, after)):
        grid.paste(a, (col * size, 0))
        grid.paste(b, (col * size, size))
    grid.save(out / GRID)
    return [GRID]
