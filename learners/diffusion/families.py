"""The pipeline families the diffusion learner trains, told apart by model_index.json's `_class_name`, and what differs
between them: how captions become the denoiser's conditioning, how pixels become latents, and how the denoiser is
called. Everything else (LoRA, noise, the flow or epsilon/v objective, sync) is shared (objective.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from yeto.learners.diffusion.components import Built


@dataclass(frozen=True)
class Family:
    name: str
    pipeline: str          # the Diffusers pipeline class (model_index.json `_class_name`)
    denoiser: str          # its component the LoRA wraps: "unet" or "transformer"
    video: bool            # clips (B, 3, F, H, W) rather than images (B, 3, H, W)


FAMILIES = {f.pipeline: f for f in (
    Family("sd", "StableDiffusionPipeline", "unet", video=False),
    Family("sd3", "StableDiffusion3Pipeline", "transformer", video=False),
    Family("ltx-video", "LTXPipeline", "transformer", video=True),
    Family("wan", "WanPipeline", "transformer", video=True),
)}
NAMES = tuple(f.name for f in FAMILIES.values())
NOT_YET = {"StableDiffusionXLPipeline": "SDXL (a second text encoder and add_time_ids)",
           "FluxPipeline": "Flux (packed latents, guidance embedding)",
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


@torch.no_grad()
def condition(built: Built, captions: list[str]) -> dict[str, torch.Tensor]:
    """The denoiser's text conditioning, by the pipeline's own encode_prompt (no classifier-free guidance)."""
    device, name = built.accel.device, built.family.name
    if name == "sd":
        tok = built.tokenizer
        ids = tok(captions, padding="max_length", max_length=tok.model_max_length, truncation=True,
                  return_tensors="pt")
        return {"encoder_hidden_states": built.text_encoder(ids.input_ids.to(device))[0]}
    pipe = built.pipe
    if name == "sd3":
        states, _, pooled, _ = pipe.encode_prompt(prompt=captions, prompt_2=None, prompt_3=None, device=device,
                                                  do_classifier_free_guidance=False,
                                                  max_sequence_length=pipe.tokenizer_3.model_max_length)
        return {"encoder_hidden_states": states, "pooled_projections": pooled}
    if name == "wan":
        states, _ = pipe.encode_prompt(prompt=captions, do_classifier_free_guidance=False, device=device,
                                       max_sequence_length=pipe.tokenizer.model_max_length)
        return {"encoder_hidden_states": states}
    states, mask, _, _ = pipe.encode_prompt(prompt=captions, do_classifier_free_guidance=False, device=device,
                                            max_sequence_length=pipe.tokenizer_max_length)
    return {"encoder_hidden_states": states, "encoder_attention_mask": mask}


@torch.no_grad()
def latents(built: Built, pixels: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The VAE's latents, drawn from its posterior with our CPU generator (repeatable anywhere) and normalized as the
    pipeline expects: (x - shift) * scaling, or per-channel mean/std for the video VAEs (LTX-Video, Wan)."""
    vae = built.vae
    if built.family.video and pixels.ndim == 4:
        pixels = pixels.unsqueeze(2)                       # an image is a one-frame clip
    dist = vae.encode(pixels.to(built.accel.device, vae.dtype)).latent_dist
    noise = torch.randn(dist.mean.shape, generator=generator).to(dist.mean.device, dist.mean.dtype)
    sample = dist.mean + dist.std * noise
    if built.family.name == "ltx-video":
        return built.pipe._normalize_latents(sample, vae.latents_mean, vae.latents_std, vae.config.scaling_factor)
    if built.family.name == "wan":                          # the inverse of WanPipeline's decode
        mean, std = (torch.tensor(vae.config[k]).view(1, -1, 1, 1, 1).to(sample) for k in ("latents_mean", "latents_std"))
        return (sample - mean) / std
    shift = getattr(vae.config, "shift_factor", None) or 0.0
    return (sample - shift) * vae.config.scaling_factor


def predict(built: Built, noisy: torch.Tensor, t: torch.Tensor, cond: dict[str, torch.Tensor]) -> torch.Tensor:
    """The denoiser's prediction, shaped like `noisy`."""
    name, model = built.family.name, built.model
    if name == "sd":
        return model(noisy, t, **cond).sample
    if name in ("sd3", "wan"):
        return model(hidden_states=noisy, timestep=t.float(), return_dict=False, **cond)[0]
    pipe = built.pipe
    p, pt = pipe.transformer_spatial_patch_size, pipe.transformer_temporal_patch_size
    _, _, frames, height, width = noisy.shape
    scale = (pipe.vae_temporal_compression_ratio / 25, pipe.vae_spatial_compression_ratio,
             pipe.vae_spatial_compression_ratio)            # the pipeline's default 25 fps
    out = model(hidden_states=pipe._pack_latents(noisy, p, pt), timestep=t.float(), num_frames=frames // pt,
                height=height // p, width=width // p, rope_interpolation_scale=scale, return_dict=False, **cond)[0]
    return pipe._unpack_latents(out, frames // pt, height // p, width // p, p, pt)
