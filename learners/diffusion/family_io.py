"""What goes in and out of each family's parts (families.py): captions to the denoiser's conditioning through the
pipeline's own encode_prompt, pixels to normalized latents through the frozen VAE, and the denoiser's call with
the extra inputs it takes (pooled projections, token ids, packed latents, rotary scales)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from yeto.learners.diffusion.components import Built

FLUX_GUIDANCE = 3.5     # Diffusers' Flux LoRA script's default, for a transformer with a guidance embedding (FLUX.1-dev)


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
    if name == "flux":
        states, pooled, text_ids = pipe.encode_prompt(prompt=captions, prompt_2=None, device=device,
                                                      max_sequence_length=pipe.tokenizer_2.model_max_length)
        return {"encoder_hidden_states": states, "pooled_projections": pooled, "txt_ids": text_ids}
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
    if name == "flux":                                      # 2 x 2 latent patches as tokens, with their positions
        batch, channels, height, width = noisy.shape
        ids = pipe._prepare_latent_image_ids(batch, height // 2, width // 2, noisy.device, noisy.dtype)
        guidance = (torch.full((batch,), FLUX_GUIDANCE, device=noisy.device) if model.config.guidance_embeds
                    else None)
        out = model(hidden_states=pipe._pack_latents(noisy, batch, channels, height, width), img_ids=ids,
                    timestep=t.float() / 1000, guidance=guidance, return_dict=False, **cond)[0]
        scale = pipe.vae_scale_factor
        return pipe._unpack_latents(out, height * scale, width * scale, scale)
    p, pt = pipe.transformer_spatial_patch_size, pipe.transformer_temporal_patch_size
    _, _, frames, height, width = noisy.shape
    scale = (pipe.vae_temporal_compression_ratio / 25, pipe.vae_spatial_compression_ratio,
             pipe.vae_spatial_compression_ratio)            # the pipeline's default 25 fps
    out = model(hidden_states=pipe._pack_latents(noisy, p, pt), timestep=t.float(), num_frames=frames // pt,
                height=height // p, width=width // p, rope_interpolation_scale=scale, return_dict=False, **cond)[0]
    return pipe._unpack_latents(out, frames // pt, height // p, width // p, p, pt)
