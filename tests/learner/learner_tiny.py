"""The tiny learner material for the tests, by its old name: yeto.learners.torch.tiny (the benchmarks' too).

It lives beside the diffusion learner's tiny pipeline, so the benchmarks reach it through the torch learner's face.
"""
from __future__ import annotations

from yeto.learners.torch.tiny import (
    CHAT_TEMPLATE,
    SPECIALS,
    WORDS,
    chat_rows,
    count_text,
    material,
    packed_batches,
    tiny_model,
    train_tokenizer,
    write_chat_jsonl,
    write_model_dir,
)

__all__ = ["CHAT_TEMPLATE", "SPECIALS", "WORDS", "chat_rows", "count_text", "material", "packed_batches", "tiny_model",
           "train_tokenizer", "write_chat_jsonl", "write_model_dir"]
