"""samples.png of a diffusion artifact: the recipe's prompts sampled with the base pipeline (top row) and with the
run's LoRA loaded (bottom row), same seeds, few inference steps: the adapter's effect at a glance. A video sample is
a frame strip (its frames left to right)."""
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
    """One image per prompt; a clip's frames side by side (a frame strip) when the section samples --frames > 1."""
    import torch
    from PIL import Image
    h, w = section.height or section.resolution, section.width or section.resolution
    clip = {"num_frames": section.frames} if section.frames > 1 else {}
    out = []
    for i, prompt in enumerate(section.sample_prompts):
        result = pipe(prompt, num_inference_steps=section.sample_steps, height=h, width=w, output_type="pil",
                      generator=torch.Generator().manual_seed(SEED + i), **clip)
        frames = result.frames[0] if clip else result.images[:1]
        strip = Image.new("RGB", (w * len(frames), h))
        for k, frame in enumerate(frames):
            strip.paste(frame, (k * w, 0))
        out.append(strip)
    return out


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
    w, h = before[0].size
    grid = Image.new("RGB", (w * len(before), h * 2))
    for col, (a, b) in enumerate(zip(before, after)):
        grid.paste(a, (col * w, 0))
        grid.paste(b, (col * w, h))
    grid.save(out / GRID)
    return [GRID]
