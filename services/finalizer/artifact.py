"""The run's output folder, assembled from the syncer's final f32 state (schemas/artifact_layout.py): `artifact/`
holds what a user deploys (a peft LoRA adapter or a full model in sharded safetensors, the tokenizer and its chat
template, a model card: card.py), `resume/` what a resume needs (resume_state.py), and the signed manifest at the top
names every file by its relative path with its sha256, the recipe and the provenance (provenance.py); manifest.sig is
the stack's Ed25519 signature of manifest.json's bytes (infra/signing.py)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from yeto.infra import signing
from yeto.infra.model_source import ModelSource, resolve
from yeto.infra.source_pins import sha256_file  # one file hash for pins, manifests and fetches (re-exported: api.py)
from yeto.schemas.artifact_layout import DEPLOY, deploy_name
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.train_section import TrainSection
from yeto.services.finalizer import resume_state
from yeto.services.finalizer.card import CARD_FILE, hub_id, model_card
from yeto.services.finalizer.diffusion_artifact import is_diffusion, write_diffusion_artifact
from yeto.services.finalizer.provenance import provenance

ADAPTER_NAME = "default"   # peft's name of the one adapter a learner trains



def is_adapter(state: dict[str, np.ndarray]) -> bool:
    return any(".lora_A." in n or ".lora_B." in n for n in state)


def adapter_tensors(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Trainable-parameter names -> the names peft saves (without the adapter name)."""
    return {n.replace(f".{ADAPTER_NAME}.", "."): np.ascontiguousarray(v, dtype=np.float32) for n, v in state.items()}


def target_modules(state: dict[str, np.ndarray]) -> list[str]:
    return sorted({n.split(".lora_")[0].rsplit(".", 1)[-1] for n in state if ".lora_" in n})


def _write_adapter(state: dict[str, np.ndarray], train: TrainSection, base: str, out: Path) -> list[str]:
    """`base` is where the base loads from here; the config names its Hub id (and pinned commit) where it has one,
    so AutoPeftModelForCausalLM loads the adapter on any machine that can reach or has cached that id."""
    from peft import LoraConfig
    from safetensors.numpy import save_file

    hub = hub_id(train.model)
    revision = train.pins.get("base", {}).get("revision") if hub else None
    config = LoraConfig(r=train.lora_r, lora_alpha=train.lora_alpha,
                        lora_dropout=train.lora_dropout, target_modules=target_modules(state),
                        bias="none", task_type="CAUSAL_LM", base_model_name_or_path=hub or base, revision=revision)
    config.save_pretrained(str(out))
    _sort_sets(config, out / "adapter_config.json")
    save_file(adapter_tensors(state), str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    return ["adapter_config.json", "adapter_model.safetensors"]


def _sort_sets(config: Any, path: Path) -> None:
    """peft writes a set field (target_modules) in the set's order, which string hashing randomizes per process: the
    same run's adapter_config.json, and so its manifest, differed between two finalizer processes. Sorted here, in
    peft's own layout (sorted keys, indent 2)."""
    fields = json.loads(path.read_text())
    for name, value in vars(config).items():
        if isinstance(value, set) and isinstance(fields.get(name), list):
            fields[name] = sorted(fields[name])
    path.write_text(json.dumps(fields, indent=2, sort_keys=True))


def _save_tokenizer(source: ModelSource, out: Path) -> None:
    """The base's tokenizer and chat template, with the pad token the learners train with (eos when it has none). A
    GGUF's is read from the folder its first read was saved to (infra/gguf_tokenizer.py; a local run's learners made
    it): the same files as a walk of the GGUF's metadata gives, without the walk (6.9 CPU s for the bundled SmolLM2)."""
    from yeto.infra import gguf_tokenizer

    gguf_tokenizer.load(source).save_pretrained(str(out))


def _write_full(state: dict[str, np.ndarray], source, out: Path, max_shard_size: str) -> list[str]:
    import torch
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file
    from transformers import AutoConfig

    from yeto.infra import gguf_reads
    tensors = {n: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for n, v in state.items()}
    split = split_torch_state_dict_into_shards(tensors, max_shard_size=max_shard_size)
    for filename, names in split.filename_to_tensors.items():
        save_file({n: tensors[n] for n in names}, str(out / filename), metadata={"format": "pt"})
    files = list(split.filename_to_tensors)
    if split.is_sharded:
        index = {"metadata": {"total_size": sum(t.numel() * 4 for t in tensors.values())}, "weight_map": split.tensor_to_filename}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
        files.append("model.safetensors.index.json")
    gguf_reads.install_for(source)
    AutoConfig.from_pretrained(source.location, gguf_file=source.gguf_file, revision=source.revision).save_pretrained(str(out))
    return files + ["config.json"]


def write_artifact(state: dict[str, np.ndarray], *, recipe: dict[str, Any] | LaunchRecipe, out: Path, run_id: str,
                   versions: dict[int, int], acked: list[str], max_shard_size: str = "2GB",
                   snapshot_dir: Path | None = None, run: dict[str, Any] | None = None,
                   key: Ed25519PrivateKey | None = None) -> tuple[str, list[str], str]:
    """Write the output folder `out`; returns (kind, files by relative path, manifest sha256). Deterministic for the
    same input.
    `run` is the finalizer's run summary (fleet, rounds_merged, learner_steps); `key` signs the manifest."""
    if is_diffusion(recipe):     # the Diffusers LoRA format, with before/after samples (diffusion_artifact.py)
        return write_diffusion_artifact(state, recipe=recipe, out=out, run_id=run_id, versions=versions, acked=acked,
                                        run=run, key=key)
    typed = LaunchRecipe.upcast(recipe)
    train = typed.train
    source = replace(resolve(train.model), revision=train.pins.get("base", {}).get("revision"))
    deploy = out / DEPLOY       # what a user deploys; the resume state goes beside it (resume_state.py)
    deploy.mkdir(parents=True, exist_ok=True)
    kind = "adapter" if is_adapter(state) else "full"
    base = source.location if source.gguf_file is None else str(Path(source.location) / source.gguf_file)
    names = (_write_adapter(state, train, base, deploy) if kind == "adapter"
             else _write_full(state, source, deploy, max_shard_size))
    before = {p.name for p in deploy.iterdir()}
    _save_tokenizer(source, deploy)
    names += sorted({p.name for p in deploy.iterdir()} - before - set(names))
    prov = provenance(typed, run or {})
    model_card(run_id=run_id, kind=kind, recipe=typed, provenance=prov, run=run or {}).save(deploy / CARD_FILE)
    names.append(CARD_FILE)     # before the manifest: hashed and signed like every other file
    files = [deploy_name(n) for n in names] + resume_state.write(out, snapshot_dir)   # θ and momentum, for --resume-from
    manifest = {
        "manifest_version": 2, "run_id": run_id, "kind": kind, "base_model": train.model, "base_location": base,
        "files": {f: sha256_file(out / f) for f in sorted(set(files))},
        "versions": {str(k): v for k, v in sorted(versions.items())}, "acked_by": sorted(acked),
        "recipe": typed.wire() if isinstance(recipe, LaunchRecipe) else recipe,      # the run's, as launched
        "data": typed.data_check.model_dump(exclude_unset=True),
        "num_parameters": int(sum(v.size for v in state.values())),
        "adapter_for": None if kind != "adapter" else "the bf16 base" + (   # QLoRA: the NF4 base was only for training
            ", trained over its NF4 quantization" if train.base_quantization == "nf4" else ""),
        "resume": resume_state.describe(out, files, typed),
        "provenance": prov, "signer_public_key": signing.public_hex(key) if key else "",
    }
    text = json.dumps(manifest, indent=2, sort_keys=True)
    (out / "manifest.json").write_text(text)
    written = sorted(set(files)) + ["manifest.json"]
    if key is not None:     # over manifest.json's exact bytes: every file's sha256 is in them
        (out / signing.SIG_FILE).write_text(signing.sign(key, text.encode()) + "\n")
        written.append(signing.SIG_FILE)
    return kind, written, hashlib.sha256(text.encode()).hexdigest()
