"""A tiny Mixtral (4 experts, 2 per token) with the word-level tokenizer of learners/torch/tiny.py, built offline."""
from __future__ import annotations

from pathlib import Path

import torch

from yeto.learners.torch.tiny import chat_rows, train_tokenizer, write_chat_jsonl


def tiny_moe(vocab_size: int, *, seed: int = 0, experts: int = 4, layers: int = 2):
    from transformers import MixtralConfig, MixtralForCausalLM
    config = MixtralConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=experts,
                           num_experts_per_tok=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                           tie_word_embeddings=False, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    torch.manual_seed(seed)
    return MixtralForCausalLM(config)


def write_model_dir(path: Path, *, seed: int = 0, experts: int = 4) -> Path:
    """A transformers model directory: config, safetensors weights, tokenizer with chat template."""
    tok = train_tokenizer()
    tiny_moe(len(tok), seed=seed, experts=experts).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def material(root: Path) -> dict:
    """The tiny MoE, a learnable counting chat set and held-out rows."""
    return {"model": write_model_dir(root / "model"), "data": write_chat_jsonl(root / "chat.jsonl", 300),
            "heldout": chat_rows(40, seed=99)}
