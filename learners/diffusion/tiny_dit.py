"""Tiny random-init transformer (DiT) pipelines built offline: Stable Diffusion 3 (MMDiT, two CLIP text encoders, no
T5) and LTX-Video (a 3D transformer over a causal video VAE, a T5 encoder), plus captioned clips for the video data
contract. The real Diffusers classes at a size that trains in seconds on a CPU (the configs of Diffusers' own tests)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from yeto.learners.diffusion.tiny_tokenizer import write_tokenizer_files


def _tokenizer(scratch: Path, name: str):
    from transformers import CLIPTokenizer
    return CLIPTokenizer(*map(str, write_tokenizer_files(scratch / name)), model_max_length=32,
                         pad_token="<|endoftext|>")


def _t5(width: int):
    from transformers import T5Config
    return T5Config(vocab_size=128, d_model=width, d_kv=8, d_ff=37, num_layers=2, num_heads=4, pad_token_id=1,
                    eos_token_id=1, decoder_start_token_id=0)


def tiny_sd3(*, seed: int, scratch: Path):
    """StableDiffusion3Pipeline: an SD3Transformer2DModel (joint attention over 64-wide text states), two CLIP encoders
    with projections (pooled 32 + 32), a T5 encoder, a 1-block VAE (latents 4 x H x W), flow matching."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5EncoderModel

    torch.manual_seed(seed)
    transformer = SD3Transformer2DModel(sample_size=16, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8,
                                        num_attention_heads=4, caption_projection_dim=32, joint_attention_dim=64,
                                        pooled_projection_dim=64, out_channels=4)
    clip = dict(vocab_size=128, hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
                max_position_embeddings=32, projection_dim=32, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    vae = AutoencoderKL(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(8,), layers_per_block=1,
                        latent_channels=4, norm_num_groups=4, use_quant_conv=False, use_post_quant_conv=False,
                        shift_factor=0.0609, scaling_factor=1.5035)
    return StableDiffusion3Pipeline(
        transformer=transformer, vae=vae, scheduler=FlowMatchEulerDiscreteScheduler(),
        text_encoder=CLIPTextModelWithProjection(CLIPTextConfig(**clip)), tokenizer=_tokenizer(scratch, "t1"),
        text_encoder_2=CLIPTextModelWithProjection(CLIPTextConfig(**clip)), tokenizer_2=_tokenizer(scratch, "t2"),
        text_encoder_3=T5EncoderModel(_t5(64)), tokenizer_3=_tokenizer(scratch, "t3"))


def tiny_ltx_video(*, seed: int, scratch: Path):
    """LTXPipeline: an LTXVideoTransformer3DModel, a causal AutoencoderKLLTXVideo compressing 4x in time and space
    (9 frames of 32 x 32 -> 3 x 8 x 8 latents of 8 channels; the pipeline takes multiples of 32), a T5 encoder, flow matching."""
    from diffusers import AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXPipeline, LTXVideoTransformer3DModel
    from transformers import T5EncoderModel

    torch.manual_seed(seed)
    transformer = LTXVideoTransformer3DModel(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1,
                                             num_attention_heads=4, attention_head_dim=8, cross_attention_dim=32,
                                             num_layers=2, caption_channels=32)
    vae = AutoencoderKLLTXVideo(in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8, 8, 8, 8),
                                decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
                                decoder_layers_per_block=(1, 1, 1, 1, 1),
                                spatio_temporal_scaling=(True, True, False, False),
                                decoder_spatio_temporal_scaling=(True, True, False, False),
                                decoder_inject_noise=(False,) * 5, upsample_residual=(False,) * 4,
                                upsample_factor=(1,) * 4, timestep_conditioning=False, patch_size=1, patch_size_t=1,
                                encoder_causal=True, decoder_causal=False)
    text = T5EncoderModel(_t5(32))
    return LTXPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text,
                       tokenizer=_tokenizer(scratch, "t"), transformer=transformer)


def tiny_wan(*, seed: int, scratch: Path):
    """WanPipeline (Wan 2.1 layout, one transformer): a WanTransformer3DModel over an AutoencoderKLWan compressing 4x
    in time and 8x in space (9 frames of 32 x 32 -> 3 x 4 x 4 latents of 16 channels), a UMT5 encoder, flow
    matching."""
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(seed)
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                        in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
                                        num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                        rope_max_seq_len=32)
    vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True])
    return WanPipeline(tokenizer=_tokenizer(scratch, "t"), text_encoder=UMT5EncoderModel(UMT5Config(**_t5(32).to_dict())),
                       vae=vae,
                       transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0))


def tiny_flux(*, seed: int, scratch: Path):
    """FluxPipeline: a FluxTransformer2DModel (double- and single-stream blocks, latents packed 2 x 2 into tokens), a
    CLIP encoder (pooled) and a T5 encoder (states), a 1-block VAE (latents 4 x H x W), flow matching, no guidance
    embedding (FLUX.1-schnell's layout)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5EncoderModel

    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                         pooled_projection_dim=32, axes_dims_rope=[4, 4, 8])
    clip = CLIPTextConfig(vocab_size=128, hidden_size=32, intermediate_size=37, num_attention_heads=4,
                          num_hidden_layers=2, max_position_embeddings=32, projection_dim=32, bos_token_id=0,
                          eos_token_id=1, pad_token_id=1)
    vae = AutoencoderKL(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(8,), layers_per_block=1,
                        latent_channels=4, norm_num_groups=4, use_quant_conv=False, use_post_quant_conv=False,
                        shift_factor=0.0609, scaling_factor=1.5035)
    return FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=CLIPTextModel(clip),
                        tokenizer=_tokenizer(scratch, "t1"), text_encoder_2=T5EncoderModel(_t5(32)),
                        tokenizer_2=_tokenizer(scratch, "t2"), transformer=transformer)


BUILDERS = {"sd3": tiny_sd3, "flux": tiny_flux, "ltx-video": tiny_ltx_video, "wan": tiny_wan}


def write_tiny_clips(folder: Path, *, num_clips: int = 16, frames: int = 12, size: int = 32, seed: int = 0) -> Path:
    """A folder of captioned MP4 clips (the video data contract: metadata.jsonl with file_name and text): a coloured
    square moving across a dark ground in the direction the caption names, so the denoiser has motion to learn."""
    import av
    import numpy as np
    rng = random.Random(seed)
    colours = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40)}
    moves = {"left to right": (1, 0), "right to left": (-1, 0), "top to bottom": (0, 1), "bottom to top": (0, -1)}
    folder.mkdir(parents=True, exist_ok=True)
    rows, half = [], size // 2
    for i in range(num_clips):
        colour, move = rng.choice(sorted(colours)), rng.choice(sorted(moves))
        name = f"{i:03d}.mp4"
        with av.open(str(folder / name), "w") as out:
            stream = out.add_stream("mpeg4", rate=8)
            stream.width, stream.height, stream.pix_fmt = size, size, "yuv420p"
            for f in range(frames):
                pos = round(f * half / max(1, frames - 1))
                x = pos if moves[move][0] > 0 else half - pos if moves[move][0] < 0 else half // 2
                y = pos if moves[move][1] > 0 else half - pos if moves[move][1] < 0 else half // 2
                frame = np.full((size, size, 3), (20, 20, 30), np.uint8)
                frame[y:y + half, x:x + half] = colours[colour]
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        rows.append({"file_name": name, "text": f"a {colour} square moving {move}"})
    (folder / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder
