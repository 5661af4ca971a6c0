"""A tiny random-init Stable Diffusion pipeline built offline (UNet, VAE, CLIP text encoder and tokenizer), for tests
and the CPU-size benchmark: the real Diffusers classes at a size that trains in seconds."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from yeto.learners.diffusion.tiny_tokenizer import write_tokenizer_files


def tiny_pipeline(*, seed: int = 0, scratch: Path, prediction_type: str = "epsilon"):
    """A StableDiffusionPipeline of random-init components (latents 4 x H/2 x W/2); `scratch` takes the tokenizer's
    source files (CLIPTokenizer reads a vocabulary and merges from files)."""
    from diffusers import AutoencoderKL, DDPMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(seed)
    unet = UNet2DConditionModel(block_out_channels=(16, 32), layers_per_block=1, sample_size=8, in_channels=4,
                                out_channels=4, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
                                attention_head_dim=4, norm_num_groups=8)
    vae = AutoencoderKL(block_out_channels=(8, 16), in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        norm_num_groups=4, sample_size=16)
    text = CLIPTextModel(CLIPTextConfig(vocab_size=128, hidden_size=32, intermediate_size=37, num_attention_heads=4,
                                        num_hidden_layers=2, max_position_embeddings=32, bos_token_id=0,
                                        eos_token_id=1, pad_token_id=1))
    tokenizer = CLIPTokenizer(*map(str, write_tokenizer_files(scratch)), model_max_length=32,
                              pad_token="<|endoftext|>")
    scheduler = DDPMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012,
                              clip_sample=False, steps_offset=1, prediction_type=prediction_type)
    return StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=tokenizer, unet=unet, scheduler=scheduler,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)


def write_tiny_pipeline(folder: Path, *, seed: int = 0, prediction_type: str = "epsilon", family: str = "sd") -> Path:
    """Save a tiny pipeline as a Diffusers model folder (model_index.json and one subfolder per component): "sd" (the
    UNet), or a transformer family of learners/diffusion/tiny_dit.py ("sd3", "ltx-video")."""
    import tempfile

    from yeto.learners.diffusion.tiny_dit import BUILDERS
    if family != "sd" and family not in BUILDERS:
        raise ValueError(f"tiny family {family!r}: one of sd, {', '.join(BUILDERS)}")
    with tempfile.TemporaryDirectory() as scratch:
        pipe = (tiny_pipeline(seed=seed, scratch=Path(scratch), prediction_type=prediction_type) if family == "sd"
                else BUILDERS[family](seed=seed, scratch=Path(scratch)))
        pipe.save_pretrained(Path(folder))
    return Path(folder)


def write_tiny_images(folder: Path, *, num_images: int = 24, size: int = 16, seed: int = 0) -> Path:
    """A folder of captioned images (the diffusion data contract: metadata.jsonl with file_name and text): coloured
    squares on a dark ground whose colour and corner the caption names, so the denoiser has something to learn."""
    import random

    from PIL import Image
    rng = random.Random(seed)
    colours = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40)}
    corners = {"top left": (0, 0), "top right": (1, 0), "bottom left": (0, 1), "bottom right": (1, 1)}
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(num_images):
        colour, corner = rng.choice(sorted(colours)), rng.choice(sorted(corners))
        image = Image.new("RGB", (size, size), (20, 20, 30))
        cx, cy = corners[corner]
        half = size // 2
        image.paste(colours[colour], (cx * half, cy * half, cx * half + half, cy * half + half))
        image.save(folder / f"{i:03d}.png")
        rows.append({"file_name": f"{i:03d}.png", "text": f"a {colour} square {corner}"})
    (folder / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder
