"""A tiny causal LM built offline, for tests and the CPU-size benchmarks: a 2-layer Llama and its word-level tokenizer.

The tokenizer trains in a second; the random-init Llama is saved as a model directory; the chat corpus (counting runs)
is learnable. Nothing is downloaded.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import torch

WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]


def count_text(rng: random.Random, length: int = 12) -> str:
    """A counting run that wraps around: the next word is always predictable from the last one."""
    start = rng.randrange(len(WORDS))
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(length))


def chat_rows(num_rows: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(num_rows):
        prompt = count_text(rng, 4)
        rows.append({"messages": [{"role": "user", "content": "count from " + prompt},
                                  {"role": "assistant", "content": count_text(rng, 12)}]})
    return rows


def write_chat_jsonl(path: Path, num_rows: int = 200, seed: int = 0) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in chat_rows(num_rows, seed)))
    return path


def train_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    corpus = [" ".join(WORDS), "user assistant system count from"]
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=SPECIALS))
    tok.post_processor = processors.TemplateProcessing(single="$A", special_tokens=[])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|im_end|>", bos_token="<|im_start|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(vocab_size: int, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def write_model_dir(path: Path, seed: int = 0) -> Path:
    """A transformers model directory (config, safetensors weights, tokenizer with chat template)."""
    tok = train_tokenizer()
    tiny_model(len(tok), seed).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def packed_batches(tokenizer, rows: list[dict], *, seq_len: int, micro_batch: int, seed: int = 0):
    """Endless packed batches of whole conversations, every token labelled (a stand-in for
    yeto.learners.data where a test wants no dependency on it)."""
    rng = random.Random(seed)
    stream: list[int] = []
    while True:
        rng.shuffle(rows := list(rows))
        for row in rows:
            stream += tokenizer.apply_chat_template(row["messages"], tokenize=True, return_dict=False)
            while len(stream) >= seq_len * micro_batch:
                ids = torch.tensor(stream[:seq_len * micro_batch]).view(micro_batch, seq_len)
                del stream[:seq_len * micro_batch]
                yield {"input_ids": ids, "labels": ids.clone()}


def material(root: Path) -> dict:
    """A random-init 2-layer Llama with a word-level tokenizer, a learnable counting chat set, held-out rows."""
    return {"model": write_model_dir(root / "model"), "data": write_chat_jsonl(root / "chat.jsonl", 300),
            "heldout": chat_rows(40, seed=99)}
