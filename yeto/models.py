"""The model alias table (the single source of PRODUCT.md's and the README's table) and `resolve_model`.

`min_vram_gb` is the frozen bf16 base an island's GPUs must jointly hold (2 bytes per parameter, decimal GB);
None is shown as "(Hub)": the size comes from the Hub's safetensors metadata at plan time.
"""
from __future__ import annotations

import difflib
import json
import struct
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelAlias:
    alias: str
    hf_id: str
    min_vram_gb: float | None
    tested: bool = False


MODELS: tuple[ModelAlias, ...] = (
    ModelAlias("deepseek4flash", "deepseek-ai/DeepSeek-V4-Flash", 568, tested=True),
    ModelAlias("qwen3-0.6b", "Qwen/Qwen3-0.6B", None, tested=True),
    ModelAlias("qwen36-27b", "Qwen/Qwen3.6-27B", 54, tested=True),
    ModelAlias("kimi-k3", "moonshotai/Kimi-K3", None, tested=True),
    ModelAlias("glm52", "zai-org/GLM-5.2", 1488, tested=True),
    ModelAlias("laguna-s-2.1", "poolside/Laguna-S-2.1", None, tested=True),
    ModelAlias("gemma4", "google/gemma-4-12B-it", 66, tested=False),
    ModelAlias("qwen3-8b", "Qwen/Qwen3-8B", 17, tested=False),
    ModelAlias("qwen35-4b", "Qwen/Qwen3.5-4B", 8, tested=False),
    ModelAlias("qwen35-9b", "Qwen/Qwen3.5-9B", 18, tested=False),
    ModelAlias("qwen35-9b-base", "Qwen/Qwen3.5-9B-Base", 18, tested=False),
    ModelAlias("qwen35-35b-a3b", "Qwen/Qwen3.5-35B-A3B-Base", 70, tested=False),
    ModelAlias("qwen35-397b-a17b", "Qwen/Qwen3.5-397B-A17B", 794, tested=False),
    ModelAlias("qwen36-35b-a3b", "Qwen/Qwen3.6-35B-A3B", 70, tested=False),
    ModelAlias("llama32-1b", "meta-llama/Llama-3.2-1B", 3, tested=False),
    ModelAlias("llama32-3b", "meta-llama/Llama-3.2-3B", 7, tested=False),
    ModelAlias("llama31-8b", "meta-llama/Llama-3.1-8B", 16, tested=False),
    ModelAlias("llama31-8b-it", "meta-llama/Llama-3.1-8B-Instruct", 16, tested=False),
    ModelAlias("llama31-70b", "meta-llama/Llama-3.1-70B", 141, tested=False),
    ModelAlias("llama33-70b-it", "meta-llama/Llama-3.3-70B-Instruct", 141, tested=False),
    ModelAlias("gptoss-20b", "openai/gpt-oss-20b", 42, tested=False),
    ModelAlias("gptoss-120b", "openai/gpt-oss-120b", 234, tested=False),
    ModelAlias("kimi-k2-thinking", "moonshotai/Kimi-K2-Thinking", 2060, tested=False),
    ModelAlias("kimi-k25", "moonshotai/Kimi-K2.5", 2060, tested=False),
    ModelAlias("kimi-k26", "moonshotai/Kimi-K2.6", 2060, tested=False),
    ModelAlias("deepseek31", "deepseek-ai/DeepSeek-V3.1", 1343, tested=False),
    ModelAlias("deepseek-r1", "deepseek-ai/DeepSeek-R1", 1343, tested=False),
    ModelAlias("deepseek4pro", "deepseek-ai/DeepSeek-V4-Pro", 3200, tested=False),
    ModelAlias("nemotron3-nano", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 61, tested=False),
    ModelAlias("nemotron3-super", "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16", 240, tested=False),
    ModelAlias("nemotron3-ultra", "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", 1100, tested=False),
    ModelAlias("glm45-air", "zai-org/GLM-4.5-Air", 212, tested=False),
    ModelAlias("glm46", "zai-org/GLM-4.6", 714, tested=False),
    ModelAlias("llama4-scout", "meta-llama/Llama-4-Scout-17B-16E-Instruct", 218, tested=False),
    ModelAlias("llama4-maverick", "meta-llama/Llama-4-Maverick-17B-128E-Instruct", 800, tested=False),
    ModelAlias("qwen3-coder-480b", "Qwen/Qwen3-Coder-480B-A35B-Instruct", 960, tested=False),
    ModelAlias("minimax-m2", "MiniMaxAI/MiniMax-M2", 460, tested=False),
    ModelAlias("minimax-m3", "MiniMaxAI/MiniMax-M3", None, tested=False),
    ModelAlias("kimi-k27-code", "moonshotai/Kimi-K2.7-Code", None, tested=False),
    ModelAlias("mistral-small3", "mistralai/Mistral-Small-3.2-24B-Instruct-2506", 48, tested=False),
    ModelAlias("ornith-9b", "deepreinforce-ai/Ornith-1.0-9B", 19, tested=False),
    ModelAlias("ornith-31b", "deepreinforce-ai/Ornith-1.0-31B", 62, tested=False),
    ModelAlias("ornith-35b", "deepreinforce-ai/Ornith-1.0-35B", 70, tested=False),
    ModelAlias("ornith-397b", "deepreinforce-ai/Ornith-1.0-397B", 794, tested=False),
    ModelAlias("lfm25-230m", "LiquidAI/LFM2.5-230M", 0.5, tested=False),
    ModelAlias("lfm25-1b", "LiquidAI/LFM2.5-1.2B-Instruct", 3, tested=False),
    ModelAlias("lfm25-8b-a1b", "LiquidAI/LFM2.5-8B-A1B", 17, tested=False),
    ModelAlias("vibethinker-15b", "WeiboAI/VibeThinker-1.5B", 3, tested=False),
    ModelAlias("vibethinker-3b", "WeiboAI/VibeThinker-3B", 6, tested=False),
    ModelAlias("deepseek4flash-bf16", "RedHatAI/DeepSeek-V4-Flash-BF16", 568, tested=False),
    ModelAlias("deepseek31-bf16", "unsloth/DeepSeek-V3.1-BF16", 1343, tested=False),
    ModelAlias("deepseek-r1-bf16", "unsloth/DeepSeek-R1-BF16", 1343, tested=False),
    ModelAlias("gptoss-20b-bf16", "axolotl-ai-co/gpt-oss-20b-dequantized", 42, tested=False),
    ModelAlias("gptoss-120b-bf16", "axolotl-ai-co/gpt-oss-120b-dequantized", 234, tested=False),
    ModelAlias("kimi-k2-thinking-bf16", "unsloth/Kimi-K2-Thinking-BF16", 2060, tested=False),
    ModelAlias("deepseek31-base-bf16", "unsloth/DeepSeek-V3.1-Base-BF16", 1343, tested=False),
    ModelAlias("kimi-k2-base-bf16", "unsloth/Kimi-K2-Base-BF16", 2060, tested=False),
)
_BY_ALIAS = {m.alias: m for m in MODELS}
_BY_HF_ID = {m.hf_id.lower(): m for m in MODELS}


@dataclass(frozen=True)
class ModelRef:
    """What `--model` named: an alias, a Hugging Face id, or a local directory of safetensors."""

    name: str
    hf_id: str | None = None
    local_path: str | None = None
    alias: str | None = None
    weights_gb: float | None = None   # bf16 footprint of all parameters; None until resolved from the Hub
    tested: bool = False


def resolve_model(name: str) -> ModelRef:
    """Resolve `--model`: alias, then an existing local path, then an `org/name` Hugging Face id."""
    if name in _BY_ALIAS:
        m = _BY_ALIAS[name]
        return ModelRef(name=name, hf_id=m.hf_id, alias=m.alias, weights_gb=m.min_vram_gb, tested=m.tested)
    path = Path(name).expanduser()
    if path.exists():
        return ModelRef(name=name, local_path=str(path.resolve()), weights_gb=local_weights_gb(path))
    if name.count("/") == 1 and all(name.split("/")):
        m = _BY_HF_ID.get(name.lower())
        if m:
            return ModelRef(name=name, hf_id=m.hf_id, alias=m.alias, weights_gb=m.min_vram_gb, tested=m.tested)
        return ModelRef(name=name, hf_id=name)
    close = difflib.get_close_matches(name, list(_BY_ALIAS), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(f"--model {name!r} is not an alias, an existing path, or a Hugging Face id (org/name).{hint} "
                     f"Aliases are listed in the README (yeto/models.py).")


_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                "F8_E4M3": 1, "F8_E5M2": 1, "BOOL": 1}


def _param_count(header: dict) -> int:
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


def hub_weights_gb(hf_id: str) -> float:
    """bf16 footprint from the Hub's safetensors metadata (network; HF_TOKEN for private repos)."""
    from huggingface_hub import get_safetensors_metadata
    try:
        meta = get_safetensors_metadata(hf_id)
    except Exception as e:  # offline, gated, or no safetensors: the user can give the size instead
        raise ValueError(f"could not read the size of {hf_id} from the Hugging Face Hub ({type(e).__name__}: {e}); "
                         f"pass --weights-gb with its bf16 size in GB (2 x billions of parameters)") from None
    return sum(meta.parameter_count.values()) * 2 / 1e9
