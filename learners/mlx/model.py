"""A minimal Llama-family causal LM in MLX whose parameter names are the Hugging Face ones, loaded from a model dir.

The module tree mirrors transformers' LlamaForCausalLM (`model.layers.0.self_attn.q_proj.weight`, `lm_head.weight`)
so a model directory's safetensors load by name, and LoRA tensors get the names peft gives the torch learner
(learners/mlx/lora.py). Positions come per token (packed documents restart at 0), so RoPE is computed here from
`position_ids` rather than from one offset, in the HF (non-interleaved, rotate-half) convention.
"""
from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from yeto.learners.mlx.config import LlamaConfig


def rotate(x: mx.array, cos: mx.array, sin: mx.array) -> mx.array:
    half = x.shape[-1] // 2
    return x * cos + mx.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.heads * c.head_dim, bias=c.attention_bias)
        self.k_proj = nn.Linear(c.hidden_size, self.kv_heads * c.head_dim, bias=c.attention_bias)
        self.v_proj = nn.Linear(c.hidden_size, self.kv_heads * c.head_dim, bias=c.attention_bias)
        self.o_proj = nn.Linear(self.heads * c.head_dim, c.hidden_size, bias=False)

    def __call__(self, x: mx.array, cos: mx.array, sin: mx.array, mask: mx.array) -> mx.array:
        b, n, _ = x.shape
        q = self.q_proj(x).reshape(b, n, self.heads, -1).transpose(0, 2, 1, 3)
        k = self.k_proj(x).reshape(b, n, self.kv_heads, -1).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(b, n, self.kv_heads, -1).transpose(0, 2, 1, 3)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.head_dim ** -0.5, mask=mask)
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(b, n, -1))


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.self_attn, self.mlp = Attention(c), MLP(c)
        self.input_layernorm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)

    def __call__(self, x: mx.array, cos: mx.array, sin: mx.array, mask: mx.array) -> mx.array:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = [DecoderLayer(c) for _ in range(c.num_hidden_layers)]
        self.norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)


class CausalLM(nn.Module):
    """`model(input_ids, position_ids, mask)` -> logits; `mask` is additive, (batch, 1, seq, seq)."""

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.config, self.model = c, LlamaModel(c)
        if not c.tie_word_embeddings:
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        # underscored: an MLX module's attribute that is not a parameter (nothing loads, trains or syncs it)
        self._inv_freq = 1.0 / (c.rope_theta ** (mx.arange(0, c.head_dim, 2, dtype=mx.float32) / c.head_dim))

    def __call__(self, input_ids: mx.array, position_ids: mx.array, mask: mx.array) -> mx.array:
        freqs = position_ids[..., None].astype(mx.float32) * self._inv_freq
        angles = mx.concatenate([freqs, freqs], axis=-1)[:, None]          # (batch, 1, seq, head_dim)
        cos, sin = mx.cos(angles), mx.sin(angles)
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        x = self.model.norm(x)
        return self.model.embed_tokens.as_linear(x) if self.config.tie_word_embeddings else self.lm_head(x)


def load(directory: str | Path, *, dtype: mx.Dtype = mx.float32) -> CausalLM:
    """The model of a transformers model directory (config.json + *.safetensors), weights cast to `dtype`."""
    directory = Path(directory)
    model = CausalLM(LlamaConfig.from_hf(json.loads((directory / "config.json").read_text())))
    weights: dict[str, mx.array] = {}
    for f in sorted(directory.glob("*.safetensors")):
        weights.update(mx.load(str(f)))      # type: ignore[arg-type]
    if not weights:
        raise ValueError(f"{directory}: no *.safetensors weights (the MLX learner reads safetensors, not .gguf or .bin)")
    weights = {k: v.astype(dtype) for k, v in weights.items() if "rotary_emb" not in k}
    model.load_weights(list(weights.items()), strict=True)
    model.freeze()
    mx.eval(model.parameters())
    return model
