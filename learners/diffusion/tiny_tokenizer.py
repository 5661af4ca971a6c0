"""The character-level CLIP tokenizer files of the tiny pipelines (tiny.py, tiny_dit.py), built offline."""
from __future__ import annotations

import json
import string
from pathlib import Path

CHARS = string.ascii_lowercase + string.digits + ".,'-"


def write_tokenizer_files(folder: Path) -> tuple[Path, Path]:
    """A character-level CLIP vocabulary (every char, alone and word-final) with no merges: CLIPTokenizer's BPE
    then splits words into characters, enough to tell captions apart."""
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in CHARS:
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return folder / "vocab.json", folder / "merges.txt"
