"""Chat-template tokenization with loss masks: exact from {% generation %} markers, else by rendering prefixes.

Both paths render text with the tokenizer's own chat template (the one shipped with the artifact; compiled as
transformers compiles it, learners/data/chat_template.py), record the character spans of the assistant turns,
tokenize the whole batch at once in Rust, and map spans to tokens.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from yeto.learners.data.chat_template import compile_template, render_with_assistant_indices
from yeto.learners.data.formats import Example
from yeto.learners.data.roles import RowError

GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
IGNORE = -100
METHODS = {
    "generation-markers": "exact assistant masks from the template's {% generation %} markers",
    "prefix-rendering": "assistant masks from rendering each conversation prefix (template has no generation markers)",
    "all-tokens": "--train-on all: every token is trained",
}


@dataclass(frozen=True)
class Encoded:
    input_ids: list[int]
    labels: list[int]  # IGNORE where no loss is taken


class ChatEncoder:
    """Turns normalized examples into token ids and labels with one tokenizer and chat template."""

    def __init__(self, tokenizer, *, train_on: str = "assistant") -> None:
        self.backend = getattr(tokenizer, "backend_tokenizer", None)
        if self.backend is None:
            raise ValueError(f"tokenizer {tokenizer.name_or_path!r} is not a fast tokenizer; Yeto needs its offsets "
                             "to mask assistant turns (load it with use_fast=True)")
        self.template = tokenizer.chat_template
        self.name = tokenizer.name_or_path or type(tokenizer).__name__
        self.eos_id = tokenizer.eos_token_id
        self.kwargs = dict(tokenizer.special_tokens_map)
        self.compiled = compile_template(self.template) if self.template else None
        # The template's globals merged once; each render then builds a shared context (a third faster than render())
        self._globals = {**self.compiled.globals, **self.kwargs} if self.compiled else {}
        if train_on == "all":
            self.method = "all-tokens"
        else:
            self.method = "generation-markers" if self.template and GENERATION_TAG.search(self.template) else "prefix-rendering"

    def encode(self, examples: Sequence[Example]) -> list[Encoded | RowError]:
        rendered: list[tuple[str, list[tuple[int, int]]] | RowError] = []
        for ex in examples:
            try:
                rendered.append(self._render_spans(ex) if ex.messages is not None else (ex.text, []))
            except RowError as e:
                rendered.append(e)
        chat = [i for i, r in enumerate(rendered) if not isinstance(r, RowError) and examples[i].messages is not None]
        text = [i for i, r in enumerate(rendered) if not isinstance(r, RowError) and examples[i].messages is None]
        out: list[Encoded | RowError] = list(rendered)  # errors stay in place
        encodings = self.backend.encode_batch([rendered[i][0] for i in chat], add_special_tokens=False)
        for i, enc in zip(chat, encodings):
            out[i] = Encoded(enc.ids, _labels(enc, rendered[i][1], self.method == "all-tokens"))
        for i, enc in zip(text, self.backend.encode_batch([rendered[i][0] for i in text], add_special_tokens=True)):
            ids = list(enc.ids) + ([self.eos_id] if self.eos_id is not None and enc.ids[-1:] != [self.eos_id] else [])
            out[i] = Encoded(ids, list(ids))
        return out

    def _render(self, messages: list[dict], tools, add_generation_prompt: bool = False) -> str:
        variables = {**self._globals, "messages": messages, "tools": tools, "documents": None,
                     "add_generation_prompt": add_generation_prompt}
        return "".join(self.compiled.root_render_func(self.compiled.new_context(variables, shared=True)))

    def _render_spans(self, ex: Example) -> tuple[str, list[tuple[int, int]]]:
        if self.compiled is None:
            raise RowError(f"tokenizer {self.name!r} has no chat template; pick an instruct model or use text rows")
        import jinja2
        messages = [_flatten_text_blocks(m) for m in ex.messages]
        try:
            if self.method == "generation-markers":
                return render_with_assistant_indices(self.compiled, messages, ex.tools, None, False, **self.kwargs)
            full = self._render(messages, ex.tools)
            if self.method == "all-tokens":
                return full, []
            return full, self._prefix_spans(messages, ex.tools, full)
        except jinja2.TemplateError as e:  # raise_exception() in the template: its own words
            raise RowError(f"the chat template rejected this conversation: {e}") from None
        except (TypeError, ValueError, AttributeError, KeyError) as e:  # e.g. image blocks in a text-only template
            raise RowError(f"the chat template could not render this conversation ({type(e).__name__}: {e})"
                           + _hint(ex)) from None

    def _prefix_spans(self, messages: list[dict], tools, full: str) -> list[tuple[int, int]]:
        """An assistant turn is the text between the prefix with a generation prompt and the prefix with the turn."""
        spans = []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before = self._render(messages[:i], tools, add_generation_prompt=True)
            after = full if i + 1 == len(messages) else self._render(messages[: i + 1], tools)
            if not (after.startswith(before) and full.startswith(after)):
                raise RowError(f"the chat template renders message {i + 1} differently once later messages follow, so "
                               "assistant masks cannot be derived; use a template with {% generation %} markers "
                               "or --train-on all")
            spans.append((len(before), len(after)))
        return spans


def _hint(ex: Example) -> str:
    blocks = {b.get("type") for m in ex.messages if isinstance(m.get("content"), list) for b in m["content"]}
    if blocks - {"text"}:
        return f"; it has {', '.join(sorted(blocks - {'text'}))} content blocks, which need a multimodal model's template"
    return ""


def _flatten_text_blocks(message: dict) -> dict:
    """Text-only block lists become a string, which every template handles; other blocks stay for the template."""
    content = message.get("content")
    if isinstance(content, list) and all(b.get("type") == "text" for b in content):
        return {**message, "content": "".join(b["text"] for b in content)}
    return message


def _labels(enc, spans: list[tuple[int, int]], train_all: bool) -> list[int]:
    """Train every token that overlaps an assistant span (as transformers' assistant masks do)."""
    ids = enc.ids
    if train_all:
        return list(ids)
    labels = [IGNORE] * len(ids)
    for start, end in spans:
        first = _token_at(enc, range(start, end))
        last = _token_at(enc, range(end - 1, start - 1, -1))
        if first is not None and last is not None:
            labels[first:last + 1] = ids[first:last + 1]
    return labels


def _token_at(enc, chars: range) -> int | None:
    """The token of the first char in `chars` that belongs to one (a normalizer may drop some chars)."""
    for c in chars:
        if (t := enc.char_to_token(c)) is not None:
            return t
    return None
