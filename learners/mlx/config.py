"""The Llama-family config the MLX learner builds from a transformers config.json (the fields its model reads)."""
from __future__ import annotations

from dataclasses import dataclass

ARCHITECTURES = ("llama", "mistral", "qwen2", "smollm3")   # the same blocks; qwen2 adds q/k/v biases


@dataclass(frozen=True, kw_only=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    attention_bias: bool

    @classmethod
    def from_hf(cls, config: dict) -> LlamaConfig:
        if config.get("model_type") not in ARCHITECTURES:
            raise ValueError(f"the MLX learner builds {', '.join(ARCHITECTURES)} models; this one is "
                             f"{config.get('model_type')!r}: use --backend torch")
        heads = config["num_attention_heads"]
        rope = config.get("rope_parameters") or {}
        return cls(vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
                   intermediate_size=config["intermediate_size"], num_hidden_layers=config["num_hidden_layers"],
                   num_attention_heads=heads, num_key_value_heads=config.get("num_key_value_heads") or heads,
                   head_dim=config.get("head_dim") or config["hidden_size"] // heads,
                   rms_norm_eps=config.get("rms_norm_eps", 1e-6),
                   rope_theta=rope.get("rope_theta", config.get("rope_theta", 10000.0)),
                   tie_word_embeddings=config.get("tie_word_embeddings", False),
                   attention_bias=config.get("attention_bias", config.get("model_type") == "qwen2"))
