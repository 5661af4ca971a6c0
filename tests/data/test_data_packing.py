"""Masks from both template kinds, packing invariants, and attention isolation checked on a real tiny Llama."""
from __future__ import annotations

import pytest

from conftest import chat, write_jsonl
from yeto.learners.data import DataSpec, collate, iter_blocks, normalize
from yeto.learners.data.pack import Packer
from yeto.learners.data.tokenize import IGNORE, ChatEncoder

TOOL_ROW = {"messages": [{"role": "user", "content": "Weather?"},
                         {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "w", "arguments": {}}}]},
                         {"role": "tool", "content": "18C"}, {"role": "assistant", "content": "Warm."}]}


def _trained(tok, enc) -> str:
    return tok.decode([t for t, label in zip(enc.input_ids, enc.labels) if label != IGNORE])


def test_generation_markers_give_exact_assistant_masks(generation_tokenizer):
    enc = ChatEncoder(generation_tokenizer)
    assert enc.method == "generation-markers"
    out = enc.encode([normalize(chat("Hi there", "Yeto here: hello")), normalize(TOOL_ROW)])
    assert _trained(generation_tokenizer, out[0]) == "Yeto here: hello<|im_end|>"
    assert _trained(generation_tokenizer, out[1]) == (
        '<tool_call>{"name": "w", "arguments": {}}</tool_call><|im_end|>Warm.<|im_end|>')


def test_fallback_masks_everything_but_assistant_turns(plain_tokenizer):
    enc = ChatEncoder(plain_tokenizer)
    assert enc.method == "prefix-rendering"
    out = enc.encode([normalize(chat("Hi there", "Yeto here: hello", system="sys")), normalize(TOOL_ROW)])
    assert _trained(plain_tokenizer, out[0]) == "Yeto here: hello<|im_end|>\n"
    assert "Weather" not in _trained(plain_tokenizer, out[1]) and "18C" not in _trained(plain_tokenizer, out[1])
    every = ChatEncoder(plain_tokenizer, train_on="all").encode([normalize(chat("a", "b"))])[0]
    assert every.labels == every.input_ids


def test_template_that_is_not_prefix_stable_is_a_row_error(plain_tokenizer):
    import copy
    tok = copy.deepcopy(plain_tokenizer)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% if loop.last %}END{% endif %}{% endfor %}"
    out = ChatEncoder(tok).encode([normalize(chat("q", "a"))])[0]
    assert "renders message 2 differently once later messages follow" in str(out)


def test_packer_isolates_documents_and_drops_nothing():
    packer = Packer(8, pad_id=0)
    docs = [list(range(10, 13)), list(range(20, 30)), list(range(30, 34))]  # the middle one is longer than a block
    blocks = [b for i, d in enumerate(docs) for b in packer.add(d, d, i)] + list(packer.finish())
    ids = [t for b in blocks for t, s in zip(b.input_ids, b.segment_ids) if s]
    assert ids == [t for d in docs for t in d]                       # every token, in order, none dropped
    for b in blocks:
        assert len(b.input_ids) == len(b.labels) == len(b.position_ids) == len(b.segment_ids) == 8
        for i, s in enumerate(b.segment_ids):
            first = i == 0 or b.segment_ids[i - 1] != s
            assert (b.position_ids[i] == 0) == first or s == 0      # positions restart per document
            if first or s == 0:
                assert b.labels[i] == IGNORE                        # no loss across a document boundary
        assert b.num_tokens == sum(1 for x in b.labels if x != IGNORE)
    assert [b.row_ids for b in blocks] == [[0], [1], [1, 2]]


def _tiny_llama(attn: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    cfg._attn_implementation = attn
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("attn,mode", [("eager", "4d"), ("sdpa", "4d"), ("sdpa", "packed")])
def test_no_token_attends_across_documents(tmp_path, plain_tokenizer, attn, mode):
    import torch
    torch.set_num_threads(1)
    p = write_jsonl(tmp_path / "c.jsonl", [chat(f"question {i}", "answer " * (i + 1)) for i in range(6)])
    blocks = list(iter_blocks(DataSpec(source=str(p), seq_len=96), plain_tokenizer, shard=0, num_shards=1))
    model = _tiny_llama(attn)
    batch = collate(blocks, attention=mode)
    with torch.no_grad():
        packed = model(**{k: v for k, v in batch.items() if k != "labels"}, use_cache=False).logits
        for b, block in enumerate(blocks):
            for seg in set(block.segment_ids) - {0}:
                idx = [i for i, s in enumerate(block.segment_ids) if s == seg]
                alone = model(input_ids=torch.tensor([[block.input_ids[i] for i in idx]])).logits[0]
                assert torch.allclose(packed[b, idx], alone, atol=1e-5)
    loss = model(**batch).loss
    assert torch.isfinite(loss)
