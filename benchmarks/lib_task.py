"""The CPU benchmark task: a random-init Llama (sized by flags) and a synthetic order-1 Markov chat corpus.

Replies continue a fixed random Markov chain over 256 words (known entropy floor, smooth learning curve);
the word-level tokenizer is trained here in a second, so nothing is downloaded. A real model and data set
replace both through --model and --data.
"""
from __future__ import annotations

from pathlib import Path

from yeto.learners.torch.api import tiny


def write_tiny_model(path: Path, *, layers: int = 4, hidden: int = 64, seed: int = 0) -> Path:
    """A transformers model directory: random-init Llama with `layers` layers of width `hidden`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    if (path / "config.json").is_file():
        return path
    tok = train_word_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=max(1, hidden // 16), num_key_value_heads=max(1, hidden // 32),
                         max_position_embeddings=1024, tie_word_embeddings=False, pad_token_id=0, bos_token_id=2,
                         eos_token_id=3)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


VOCAB = 256


def words(vocab: int = VOCAB) -> list[str]:
    return [f"w{i}" for i in range(vocab)]


def train_word_tokenizer(vocab: int = VOCAB):
    """The tiny learner material's word-level tokenizer and chat template over the Markov task's words."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator([" ".join(words(vocab)), "user assistant system count from"],
                            trainers.WordLevelTrainer(special_tokens=tiny.SPECIALS, vocab_size=vocab + 16))
    tok.post_processor = processors.TemplateProcessing(single="$A", special_tokens=[])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                   eos_token="<|im_end|>", bos_token="<|im_start|>")
    fast.chat_template = tiny.CHAT_TEMPLATE
    return fast


def _table(vocab: int, task_seed: int, concentration: float):
    import numpy as np
    return np.random.default_rng(task_seed).dirichlet([concentration] * vocab, size=vocab)


def markov_rows(num_rows: int, *, seed: int = 0, task_seed: int = 1234, concentration: float = 0.05,
                reply_words: int = 32, vocab: int = VOCAB) -> list[dict]:
    """Chats whose reply continues the prompt's word by a fixed random order-1 Markov chain over `vocab`
    words: a task with a known entropy floor that a small model approaches smoothly (no phase change),
    limited by how many transitions it has seen and how well it optimizes."""
    import numpy as np
    table, names = _table(vocab, task_seed, concentration), words(vocab)     # the same task for every seed
    # Each next word as `rng.choice(vocab, p=table[word])` draws it (one uniform against the row's normalized cumulative
    # sum, searchsorted right), the cumulative sums made once: the same words from the same seed, without choice's
    # per-call checks of p (3.5 s of 8000 rows, 0.3 s this way)
    cdf = table.cumsum(axis=1)
    cdf /= cdf[:, -1:]
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(num_rows):
        seq = [int(rng.integers(vocab))]
        for u in rng.random(reply_words):
            seq.append(int(cdf[seq[-1]].searchsorted(u, side="right")))
        rows.append({"messages": [{"role": "user", "content": "count from " + names[seq[0]]},
                                  {"role": "assistant", "content": " ".join(names[i] for i in seq[1:])}]})
    return rows


def markov_floor(*, task_seed: int = 1234, concentration: float = 0.05, vocab: int = VOCAB) -> float:
    """The chain's mean conditional entropy (nats per word): about the best held-out CE on reply words."""
    import numpy as np
    table = _table(vocab, task_seed, concentration)
    return float(-(table * np.log(np.clip(table, 1e-30, None))).sum(-1).mean())


def write_markov_chat(path: Path, rows: int = 8000, seed: int = 0) -> Path:
    import json
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in markov_rows(rows, seed=seed)))
    return path
