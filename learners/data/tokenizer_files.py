"""A local model's tokenizer read from its files with the `tokenizers` library, where that is exactly transformers'.

The data check needs only what ChatEncoder reads (the Rust tokenizer, the chat template, the named special tokens,
the EOS id). Loading them through transformers imports torch first: most of `yeto launch`'s own seconds
(benchmarks/startup.py). `read_tokenizer` returns None wherever transformers would build a different tokenizer
from the same folder, and the caller loads it through transformers as before:
  - a class of its own (`tokenizer_class` other than the generic one): v5 rebuilds those from vocab and merges;
  - `add_bos_token` / `add_eos_token` set, no post-processor, or split special tokens: transformers rewrites them;
  - a named or extra special token, or a `added_tokens_decoder` entry, that tokenizer.json does not hold as such:
    transformers adds it;
  - more than 100,000 tokens (transformers may patch a Mistral pre-tokenizer), several chat templates, legacy
    special_tokens_map.json / added_tokens.json / chat_template.json files.
A `.gguf` model's tokenizer is read from the folder that transformers' own read of the file was saved to the first
time (gguf_tokenizer.py); until that folder exists, None.
tests/data/test_data_tokenizer_files.py encodes the same rows both ways and compares every id and label.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

GENERIC = ("TokenizersBackend", "PreTrainedTokenizerFast")   # the second is the first's alias in transformers 5
NAMED = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
LEGACY = ("special_tokens_map.json", "added_tokens.json", "chat_template.json", "additional_chat_templates")
MAX_VOCAB = 100_000


@dataclass
class FileTokenizer:
    """The attributes of a transformers tokenizer that the data pipeline reads (learners/data/tokenize.py)."""

    backend_tokenizer: object                         # tokenizers.Tokenizer
    name_or_path: str
    chat_template: str | None
    special_tokens_map: dict[str, str] = field(default_factory=dict)

    @property
    def eos_token_id(self) -> int | None:
        eos = self.special_tokens_map.get("eos_token")
        return None if eos is None else self.backend_tokenizer.token_to_id(eos)


def read_tokenizer(source) -> FileTokenizer | None:
    """The tokenizer of a local model folder (a resolved ModelSource) as `load_tokenizer` would give it, or None
    where only transformers can build it exactly (the module docstring lists when). A GGUF's is read from the folder
    that transformers' read of it was saved to (gguf_tokenizer.py), None until that folder exists."""
    if source.gguf_file is not None:
        from yeto.infra.gguf_tokenizer import cached_folder
        folder = cached_folder(source)
        found = None if folder is None else read_tokenizer(replace(source, location=str(folder), gguf_file=None))
        return None if found is None else replace(found, name_or_path=source.location)
    folder = Path(source.location)
    if not folder.is_dir() or any((folder / n).exists() for n in LEGACY):
        return None
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        tokenizer_text = (folder / "tokenizer.json").read_text(encoding="utf-8")
        tokenizer_json = json.loads(tokenizer_text)
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or not isinstance(tokenizer_json, dict) or not _plain(config, tokenizer_json):
        return None
    template = _template(folder, config)
    if template is False:
        return None
    from tokenizers import Tokenizer
    try:
        backend = Tokenizer.from_str(tokenizer_text)
    except Exception:  # noqa: BLE001 - the Rust parser's own errors: transformers then says what is wrong
        return None
    if backend.get_vocab_size() > MAX_VOCAB:
        return None
    named = {k: _content(config[k]) for k in NAMED if config.get(k) is not None}
    if named.get("pad_token") is None and named.get("eos_token") is not None:
        named["pad_token"] = named["eos_token"]      # load_tokenizer's default: pad with EOS
    ordered = {k: named[k] for k in NAMED if k in named}
    return FileTokenizer(backend_tokenizer=backend, name_or_path=source.location, chat_template=template,
                         special_tokens_map=ordered)


def _plain(config: dict, tokenizer_json: dict) -> bool:
    """True where transformers takes tokenizer.json as it is: nothing added, rewritten or rebuilt."""
    if config.get("tokenizer_class") not in GENERIC or config.get("split_special_tokens"):
        return False
    if "add_bos_token" in config or "add_eos_token" in config or tokenizer_json.get("post_processor") is None:
        return False
    added = {a.get("content"): a for a in tokenizer_json.get("added_tokens") or [] if isinstance(a, dict)}
    specials = [_content(config[k]) for k in NAMED if config.get(k) is not None]
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    if not isinstance(extra, list):
        return False
    if any(not (isinstance(t, str) and t in added and added[t].get("special")) for t in [*specials, *map(_content, extra)]):
        return False
    decoder = config.get("added_tokens_decoder") or {}
    return isinstance(decoder, dict) and all(
        isinstance(v, dict) and v.get("content") in added and _same_token(v, added[v["content"]], k)
        for k, v in decoder.items())


def _same_token(declared: dict, held: dict, index: str) -> bool:
    keys = ("content", "lstrip", "rstrip", "normalized", "single_word", "special")
    return str(held.get("id")) == str(index) and all(declared.get(k) == held.get(k) for k in keys if k in declared)


def _content(token) -> str | None:
    return token.get("content") if isinstance(token, dict) else token


def _template(folder: Path, config: dict) -> str | None | bool:
    """chat_template.jinja wins over the config's entry, as in transformers; False: several templates."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    found = config.get("chat_template")
    if found is None or isinstance(found, str):
        return found
    return False
