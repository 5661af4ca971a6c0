"""Fixtures of the data tests: a tiny BPE tokenizer trained in a second, with ChatML templates with and without
{% generation %} markers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]

_TOOLS = ("{% if message.tool_calls %}{% for c in message.tool_calls %}<tool_call>{{ c.function | tojson }}"
          "</tool_call>{% endfor %}{% endif %}")
PLAIN_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] }}" + _TOOLS +
    "{{ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
GENERATION_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ message['content'] }}" + _TOOLS + "{{ '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def make_tokenizer(template: str | None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(FIXTURES.glob("*"))]
    corpus.append("Yeto here: DiLoCo NATS spot GPUs user assistant system tool")
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>",
                                   bos_token="<|endoftext|>", chat_template=template)


@pytest.fixture(scope="session")
def plain_tokenizer():
    return make_tokenizer(PLAIN_TEMPLATE)


@pytest.fixture(scope="session")
def generation_tokenizer():
    return make_tokenizer(GENERATION_TEMPLATE)


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def chat(q: str, a: str, system: str | None = None) -> dict:
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return {"messages": msgs}
