"""A diffusion run's artifact: the denoiser's LoRA in the Diffusers format `pipeline.load_lora_weights(folder)` loads
(pytorch_lora_weights.safetensors, keys `unet.*`, the LoRA config in its metadata), samples.png of the recipe's
prompts before and after (diffusion_samples.py) and a model card in the output folder's `artifact/`, the signed
manifest at its top, as for a language model (schemas/artifact_layout.py); no `resume/`: a diffusion run does not
resume."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from yeto.infra import signing
from yeto.infra.source_pins import sha256_file
from yeto.schemas.artifact_layout import DEPLOY, deploy_name
from yeto.schemas.diffusion_section import DiffusionSection
from yeto.services.finalizer.diffusion_samples import WEIGHTS, base_location
from yeto.services.finalizer.provenance import provenance

ADAPTER_NAME = "default"          # peft's name of the one adapter a learner trains
CARD = "README.md"
ATTENTION = ("to_q", "to_k", "to_v", "to_out.0")   # learners/diffusion/recipe.py's default targets


def is_diffusion(recipe: Any) -> bool:
    """The run's learners were diffusion learners (model_kind "diffusion"), from the recipe dict or its typed model."""
    kind = recipe.get("model_kind") if isinstance(recipe, dict) else getattr(recipe, "model_kind", None)
    return kind == "diffusion"


def _sections(recipe: Any) -> tuple[dict[str, Any], DiffusionSection]:
    data = recipe if isinstance(recipe, dict) else recipe.wire()
    return dict(data.get("train") or {}), DiffusionSection.model_validate(data.get("diffusion") or {}, strict=False)


def write_lora(state: dict[str, np.ndarray], train: dict[str, Any], out: Path) -> str:
    """The learner's trainable tensors (peft names on the denoiser) as Diffusers' LoRA file; returns its name."""
    import torch
    from diffusers import StableDiffusionPipeline
    from diffusers.utils import convert_state_dict_to_diffusers
    from peft import LoraConfig

    peft_names = {n.replace(f".{ADAPTER_NAME}.", "."): torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))
                  for n, v in state.items()}
    config = LoraConfig(r=train.get("lora_r", 16), lora_alpha=train.get("lora_alpha", 32), init_lora_weights="gaussian",
                        target_modules=list(train.get("target_modules") or ATTENTION))
    index = StableDiffusionPipeline.load_config(base_location(train))
    if "transformer" in index:      # a DiT pipeline (SD3, LTX-Video): its own loader, keys `transformer.*`
        import diffusers
        getattr(diffusers, index["_class_name"]).save_lora_weights(
            str(out), transformer_lora_layers=peft_names, transformer_lora_adapter_metadata=_metadata(config),
            weight_name=WEIGHTS)
        return WEIGHTS
    StableDiffusionPipeline.save_lora_weights(str(out), unet_lora_layers=convert_state_dict_to_diffusers(peft_names),
                                              unet_lora_adapter_metadata=_metadata(config), weight_name=WEIGHTS)
    return WEIGHTS


def _metadata(config) -> dict[str, Any]:
    """peft's LoRA config for the file's header, its sets (target_modules) sorted: Diffusers writes a set as a list in
    the set's order, which string hashing changes from process to process, so the same weights gave two files (and two
    manifests) in two finalizer processes, as adapter_config.json did for language models (artifact.py _sort_sets)."""
    return {k: sorted(v) if isinstance(v, set) else v for k, v in config.to_dict().items()}


def _card(run_id: str, train: dict[str, Any], grid: list[str]) -> str:
    sample = "\n![before (top) and after (bottom)](samples.png)\n" if grid else ""
    return (f"# {run_id}: a LoRA adapter of the diffusion denoiser of {train.get('model')}\n\n"
            "Trained with Yeto (asynchronous DiLoCo islands). Load it into the base pipeline:\n\n"
            "```python\nfrom diffusers import DiffusionPipeline\n"
            f"pipe = DiffusionPipeline.from_pretrained({train.get('model')!r})\n"
            f"pipe.load_lora_weights(\"<output>/{DEPLOY}\", weight_name=\"{WEIGHTS}\")\n```\n"
            + sample)


def write_diffusion_artifact(state: dict[str, np.ndarray], *, recipe: Any, out: Path, run_id: str,
                             versions: dict[int, int], acked: list[str], run: dict[str, Any] | None = None,
                             key: Ed25519PrivateKey | None = None) -> tuple[str, list[str], str]:
    """Write the artifact into `out`; returns (kind, files, manifest sha256), as artifact.write_artifact does."""
    from yeto.services.finalizer.diffusion_samples import sample_grid

    train, section = _sections(recipe)
    deploy = out / DEPLOY
    deploy.mkdir(parents=True, exist_ok=True)
    names = [write_lora(state, train, deploy)]
    names += sample_grid(base_location(train), deploy, section)
    (deploy / CARD).write_text(_card(run_id, train, names[1:]))
    files = [deploy_name(n) for n in [*names, CARD]]
    wire = recipe if isinstance(recipe, dict) else recipe.wire()
    manifest = {
        "manifest_version": 2, "run_id": run_id, "kind": "adapter", "model_kind": "diffusion",
        "base_model": train.get("model"), "base_location": base_location(train),
        "files": {f: sha256_file(out / f) for f in sorted(set(files))},
        "versions": {str(k): v for k, v in sorted(versions.items())}, "acked_by": sorted(acked),
        "recipe": wire, "data": wire.get("data_check", {}), "num_parameters": int(sum(v.size for v in state.values())),
        "adapter_for": "the denoiser (unet or transformer) of the base pipeline: pipeline.load_lora_weights(folder)",
        "resume": None, "provenance": provenance(recipe, run or {}),
        "signer_public_key": signing.public_hex(key) if key else "",
    }
    text = json.dumps(manifest, indent=2, sort_keys=True)
    (out / "manifest.json").write_text(text)
    written = sorted(set(files)) + ["manifest.json"]
    if key is not None:
        (out / signing.SIG_FILE).write_text(signing.sign(key, text.encode()) + "\n")
        written.append(signing.SIG_FILE)
    return "adapter", written, hashlib.sha256(text.encode()).hexdigest()
