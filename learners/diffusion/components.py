"""Load a diffusion learner's parts from a Diffusers pipeline: frozen VAE and text encoder, the noise scheduler, and the
denoiser with seeded LoRA adapters (the only trainable tensors, identical on every island)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from yeto.infra.source_pins import local_files
from yeto.learners import accel as accel_policy
from yeto.learners.diffusion.families import Family, check_shape, family_of
from yeto.learners.diffusion.recipe import DiffusionRecipe


@dataclass(frozen=True, kw_only=True)
class Built:
    """A diffusion learner ready to train; `model` is the denoiser (what the sync adapter reads)."""

    model: torch.nn.Module
    vae: torch.nn.Module
    text_encoder: torch.nn.Module
    tokenizer: Any
    scheduler: Any
    accel: accel_policy.Accel
    family: Family
    pipe: Any = None         # the whole pipeline (transformer families: its encode_prompt and latent packing)

    @property
    def objective(self) -> str:
        """"flow" for flow-matching schedulers, else the scheduler's prediction_type ("epsilon", "v_prediction")."""
        if type(self.scheduler).__name__.startswith("FlowMatch"):
            return "flow"
        return self.scheduler.config.prediction_type


def model_folder(model: str, pin: dict[str, Any] | None) -> str:
    """Where the pipeline loads from; a local folder is checked file by file against the launch's pin."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return model                       # a Hub id (pinned by id only: see docs/DIFFUSION.md)
    if not (path / "model_index.json").is_file():
        raise ValueError(f"--model {model}: no model_index.json (expected a Diffusers pipeline folder)")
    want, got = (pin or {}).get("files") or {}, local_files(path, model=False)
    if want and got != want:
        names = sorted(n for n in set(want) | set(got) if want.get(n) != got.get(n))
        raise ValueError(f"refusing a base model other than the one the run pinned: files differ in {path}: "
                         + ", ".join(names[:10]))
    return str(path.resolve())


def apply_lora(unet: torch.nn.Module, recipe: DiffusionRecipe) -> torch.nn.Module:
    """Freeze the denoiser and add LoRA adapters, drawn from the CPU generator seeded with the run's seed."""
    from peft import LoraConfig
    unet.requires_grad_(False)
    config = LoraConfig(r=recipe.lora_r, lora_alpha=recipe.lora_alpha, init_lora_weights="gaussian",
                        target_modules=list(recipe.lora_targets))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        unet.add_adapter(config)
    return unet


def _trainable_f32(denoiser: torch.nn.Module, accel: accel_policy.Accel) -> torch.nn.Module:
    dtype = accel.compute_dtype
    denoiser = denoiser.to(accel.device) if dtype == torch.float32 else denoiser.to(accel.device, dtype=dtype)
    for param in denoiser.parameters():       # the trainable adapters stay f32 under a bf16 base (Diffusers' habit)
        if param.requires_grad:
            param.data = param.data.float()
    return denoiser


def _build_transformer(folder: str, family: Family, recipe: DiffusionRecipe, accel: accel_policy.Accel) -> Built:
    """A transformer (DiT) pipeline loaded whole: its text encoders, VAE and scheduler frozen, LoRA on the denoiser."""
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(folder)
    check_shape(family, recipe.frames, recipe.media_height, recipe.media_width, pipe)
    denoiser = apply_lora(getattr(pipe, family.denoiser), recipe)       # on the CPU: seeded
    for part in pipe.components.values():
        if isinstance(part, torch.nn.Module) and part is not denoiser:
            part.requires_grad_(False).eval()
            dtype = {} if accel.compute_dtype == torch.float32 else {"dtype": accel.compute_dtype}
            part.to(accel.device, **dtype)
    pipe.set_progress_bar_config(disable=True)
    return Built(model=_trainable_f32(denoiser, accel), vae=pipe.vae, text_encoder=pipe.text_encoder,
                 tokenizer=pipe.tokenizer, scheduler=pipe.scheduler, accel=accel, family=family, pipe=pipe)


def build(recipe: DiffusionRecipe, *, accel: accel_policy.Accel) -> Built:
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from diffusers.schedulers import DDPMScheduler, FlowMatchEulerDiscreteScheduler
    from transformers import AutoTokenizer, CLIPTextModel

    folder = model_folder(recipe.model, recipe.pins.get("base"))
    family = family_of(folder)
    if family.denoiser == "transformer":
        return _build_transformer(folder, family, recipe, accel)
    check_shape(family, recipe.frames, recipe.media_height, recipe.media_width, None)
    dtype = accel.compute_dtype
    vae = AutoencoderKL.from_pretrained(folder, subfolder="vae", torch_dtype=dtype).to(accel.device).requires_grad_(False)
    text = CLIPTextModel.from_pretrained(folder, subfolder="text_encoder", dtype=dtype).to(accel.device).requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(folder, subfolder="tokenizer")
    config = DDPMScheduler.load_config(folder, subfolder="scheduler")
    flow = str(config.get("_class_name", "")).startswith("FlowMatch")
    scheduler = (FlowMatchEulerDiscreteScheduler if flow else DDPMScheduler).from_config(config)
    unet = apply_lora(UNet2DConditionModel.from_pretrained(folder, subfolder="unet"), recipe)   # on the CPU: seeded
    return Built(model=_trainable_f32(unet, accel), vae=vae.eval(), text_encoder=text.eval(), tokenizer=tokenizer,
                 scheduler=scheduler, accel=accel, family=family)
