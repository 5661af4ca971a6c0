"""The pipeline families the diffusion learner trains, told apart by model_index.json's `_class_name`, and the media
shape each takes. What differs in their calls (conditioning, latents, the denoiser) is family_io.py; everything else
(LoRA, noise, the flow or epsilon/v objective, sync) is shared (objective.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Family:
    name: str
    pipeline: str          # the Diffusers pipeline class (model_index.json `_class_name`)
    denoiser: str          # its component the LoRA wraps: "unet" or "transformer"
    video: bool            # clips (B, 3, F, H, W) rather than images (B, 3, H, W)


FAMILIES = {f.pipeline: f for f in (
    Family("sd", "StableDiffusionPipeline", "unet", video=False),
    Family("sd3", "StableDiffusion3Pipeline", "transformer", video=False),
    Family("flux", "FluxPipeline", "transformer", video=False),
    Family("ltx-video", "LTXPipeline", "transformer", video=True),
    Family("wan", "WanPipeline", "transformer", video=True),
)}
NAMES = tuple(f.name for f in FAMILIES.values())
NOT_YET = {"StableDiffusionXLPipeline": "SDXL (a second text encoder and add_time_ids)",
           "FluxKontextPipeline": "Flux Kontext (image conditioning)",
           "PixArtSigmaPipeline": "PixArt (no LoRA loader in Diffusers)", "SanaPipeline": "Sana"}


def family_of(folder: str, index: dict[str, Any] | None = None) -> Family:
    """The family of a pipeline folder (or Hub id: its model_index.json is fetched); others refused by name."""
    if index is None:
        path = Path(folder)
        if path.is_dir():
            index = json.loads((path / "model_index.json").read_text())
        else:
            from diffusers import DiffusionPipeline
            index = DiffusionPipeline.load_config(folder)
    name = str(index.get("_class_name") or "")
    if name in FAMILIES:
        return FAMILIES[name]
    if not name and "unet" in index and "text_encoder_2" not in index:
        return FAMILIES["StableDiffusionPipeline"]      # an SD 1.x / 2.x layout saved without its class name
    what = NOT_YET.get(name, name or "a pipeline without _class_name")
    raise ValueError(f"--model {folder}: {what} is not supported yet; the diffusion learner trains "
                     f"{', '.join(f'{f.name} ({f.pipeline})' for f in FAMILIES.values())} (docs/DIFFUSION.md)")


def check_shape(family: Family, frames: int, height: int, width: int, pipe: Any) -> None:
    """The media shape the family's VAE and denoiser take, refused with the sizes that would do."""
    if not family.video:
        if frames != 1:
            raise ValueError(f"--frames {frames}: {family.name} is an image family (frames 1)")
        if family.name == "flux" and (height % (2 * pipe.vae_scale_factor) or width % (2 * pipe.vae_scale_factor)):
            raise ValueError(f"--height {height} --width {width}: flux packs 2 x 2 latents, so multiples of "
                             f"{2 * pipe.vae_scale_factor}")
        return
    if family.name == "wan":
        if pipe.transformer_2 is not None:
            raise ValueError("--model: a two-expert Wan 2.2 pipeline (transformer_2) is not supported yet; the learner "
                             "trains one transformer")
        t, s = pipe.vae_scale_factor_temporal, pipe.vae_scale_factor_spatial * pipe.transformer.config.patch_size[1]
        s = max(s, 16)                                      # WanPipeline asks multiples of 16 of height and width
    else:
        t, s = pipe.vae_temporal_compression_ratio, 32     # LTXPipeline asks multiples of 32 of height and width
    if (frames - 1) % t:
        raise ValueError(f"--frames {frames}: {family.name} takes {t}k + 1 frames (e.g. {t + 1} or {2 * t + 1})")
    if height % s or width % s:
        raise ValueError(f"--height {height} --width {width}: {family.name} takes multiples of {s}")
