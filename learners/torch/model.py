"""Loading a resolved `--model` (alias, HF id, local directory, .gguf file) with transformers: tokenizer and model."""
from __future__ import annotations

from dataclasses import replace

import torch

# Resolution is shared with the CLI, the planner and the finalizer; learners import it from here as before.
from yeto.infra import gguf_reads
from yeto.infra.model_source import ModelSource, find_smollm2_gguf, resolve

__all__ = ["ModelSource", "find_smollm2_gguf", "load_config", "load_model", "load_tokenizer", "resolve"]


def _hub_error(source: ModelSource, err: Exception) -> ValueError:
    return ValueError(
        f"could not load {source.location!r} ({type(err).__name__}: {err}). If this machine is offline, "
        "pass a local model directory or a .gguf file to --model, or pre-fill the Hugging Face cache "
        "and set HF_HUB_OFFLINE=1; private repos need HF_TOKEN.")


def load_tokenizer(source: ModelSource):
    """The tokenizer (with its chat template) that belongs to the model. A GGUF's is read from the file once, then from
    the folder that read was saved to (infra/gguf_tokenizer.py: the same tokenizer, without the file's walk)."""
    from yeto.infra import gguf_tokenizer
    try:
        return gguf_tokenizer.load(source)
    except OSError as err:
        raise _hub_error(source, err) from err


def load_model(source: ModelSource, *, dtype: torch.dtype = torch.float32, quantization=None, device_map=None):
    """The causal LM on the CPU in `dtype` (GGUF weights are dequantized), ready to be tuned and moved; with a
    `quantization` config (learners/torch/quant.py), quantized while loading onto `device_map`'s device. A GGUF is
    dequantized once, then read from the safetensors folder that read was saved to (learners/data/gguf_model.py)."""
    if quantization is not None and source.gguf_file is not None:
        raise ValueError(f"--base-quantization nf4 quantizes a safetensors base, not the .gguf {source.gguf_file}: "
                         "pass the model's Hugging Face id or a local model directory")
    if source.gguf_file is not None:
        return _from_gguf(source, dtype)
    extra = {"quantization_config": quantization, "device_map": device_map} if quantization is not None else {}
    model = _read(source, dtype=dtype, **extra)
    model.config.use_cache = False      # training never reuses the KV cache
    return model


def _read(source: ModelSource, **kwargs):
    from transformers import AutoModelForCausalLM
    gguf_reads.install_for(source)
    try:
        return AutoModelForCausalLM.from_pretrained(source.location, gguf_file=source.gguf_file,
                                                    revision=source.revision, **kwargs)
    except OSError as err:
        raise _hub_error(source, err) from err


def _from_gguf(source: ModelSource, dtype: torch.dtype):
    """The GGUF's model from its cached folder, or dequantized and stored there: one process of the host derives it
    while the others (an island's ranks, the islands beside it) wait and read its folder (FolderCache.deriving)."""
    from yeto.learners.data import gguf_model
    with gguf_model.CACHE.deriving(source):
        return _from_gguf_once(source, dtype)


def _from_gguf_once(source: ModelSource, dtype: torch.dtype):
    from yeto.learners.data import gguf_model
    if (folder := gguf_model.cached_folder(source)) is not None:
        model = _read(replace(source, location=str(folder), gguf_file=None, revision=None), dtype=dtype)
        model.name_or_path = model.config._name_or_path = source.location   # what a GGUF read names (adapters)
    else:
        model = _read(source, dtype=torch.float32)
        # The GGUF weights are dequantized on load: what remains is a plain model, and without its
        # (non-serializable) GGUF quantizer it can be saved, merged and exported like any other.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        gguf_model.store(source, model)
        model = model.to(dtype)
    model.config.use_cache = False
    return model


def load_config(source: ModelSource):
    """The model's config (a GGUF's from its cached folder when there is one)."""
    from transformers import AutoConfig

    from yeto.learners.data import gguf_model
    if source.gguf_file is not None and (folder := gguf_model.cached_folder(source)) is not None:
        return AutoConfig.from_pretrained(str(folder))
    gguf_reads.install_for(source)
    return AutoConfig.from_pretrained(source.location, gguf_file=source.gguf_file, revision=source.revision)
