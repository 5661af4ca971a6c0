"""Detect a row's format (openai, sharegpt, alpaca, text, prompt-completion) and normalize it to one chat form."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from yeto.learners.data.roles import RowError, normalize_message
from yeto.learners.data.rows import json_type

EXPECTED = ("expected messages (openai), conversations (sharegpt), instruction+output (alpaca), "
            "prompt+completion, or text")


@dataclass(frozen=True)
class Example:
    """A normalized row: a conversation (with its tool schemas), or plain text trained on in full."""

    format: str
    messages: list[dict] | None = None
    tools: list[dict] | None = None
    text: str | None = None


def detect(row: Mapping[str, Any], fm: Mapping[str, str]) -> str:
    def has(key: str) -> bool:
        return row.get(fm.get(key, key)) is not None
    found = []
    if has("messages"):
        msgs = row[fm.get("messages", "messages")]
        first = msgs[0] if isinstance(msgs, list) and msgs and isinstance(msgs[0], dict) else {}
        found.append("sharegpt" if "from" in first and "role" not in first else "openai")
    if has("conversations"):
        found.append("sharegpt")
    if has("instruction") and has("output"):
        found.append("alpaca")
    if has("prompt") and has("completion"):
        found.append("prompt-completion")
    if has("text") and not found:  # a `text` column beside a conversation is usually a rendering of it
        found.append("text")
    if len(set(found)) > 1:
        raise RowError(f"ambiguous row: it matches {' and '.join(found)}; pass --data-format to choose")
    if not found:
        raise RowError(f"no known format in keys {sorted(row)}; {EXPECTED} (rename keys with --field-map)")
    return found[0]


def normalize(row: Mapping[str, Any], data_format: str = "auto", field_map: Mapping[str, str] | None = None) -> Example:
    """The row as an Example; RowError (never another error) for anything a row's content can cause."""
    fm = field_map or {}
    try:
        fmt = detect(row, fm) if data_format == "auto" else data_format
        return _NORMALIZERS[fmt](row, fm)
    except RowError:
        raise
    except RecursionError:
        raise RowError("nested too deeply to read (keep rows to a few hundred levels of nesting)") from None
    except (ValueError, TypeError) as e:   # e.g. embedded JSON with an integer too long to convert
        raise RowError(f"unreadable content: {e}") from None


def _get(row: Mapping[str, Any], fm: Mapping[str, str], key: str, fmt: str, *, kind: type = str, required=True):
    name = fm.get(key, key)
    value = row.get(name)
    if value is None:
        if required:
            raise RowError(f"missing {name!r} (needed by --data-format {fmt})")
        return None
    if not isinstance(value, kind):
        want = "a string" if kind is str else "a list"
        raise RowError(f"{name!r} must be {want}, got {json_type(value)}")
    return value


def _conversation(messages: list, fm, fmt: str, *, sharegpt: bool, tools=None, system: str | None = None) -> Example:
    if not messages:
        raise RowError("empty conversation")
    out = [normalize_message(m, i, fm, sharegpt=sharegpt) for i, m in enumerate(messages, start=1)]
    if system and out[0]["role"] != "system":
        out.insert(0, {"role": "system", "content": system})
    if not any(m["role"] == "assistant" for m in out):
        raise RowError("no assistant message to train on")
    if isinstance(tools, str):  # LLaMA-Factory stores tool schemas as a JSON string
        try:
            tools = json.loads(tools) if tools.strip() else None
        except json.JSONDecodeError:
            raise RowError("'tools' is a string but not valid JSON") from None
    if tools is not None and not isinstance(tools, list):
        raise RowError(f"'tools' must be a list of tool schemas, got {json_type(tools)}")
    return Example(fmt, messages=out, tools=tools or None)


def _openai(row, fm) -> Example:
    messages = _get(row, fm, "messages", "openai", kind=list)
    return _conversation(messages, fm, "openai", sharegpt=False, tools=row.get(fm.get("tools", "tools")))


def _sharegpt(row, fm) -> Example:
    key = "conversations" if row.get(fm.get("conversations", "conversations")) is not None else "messages"
    messages = _get(row, fm, key, "sharegpt", kind=list)
    system = _get(row, fm, "system", "sharegpt", required=False)
    return _conversation(messages, fm, "sharegpt", sharegpt=True, tools=row.get(fm.get("tools", "tools")), system=system)


def _alpaca(row, fm) -> Example:
    instruction = _get(row, fm, "instruction", "alpaca")
    extra = _get(row, fm, "input", "alpaca", required=False)
    output = _get(row, fm, "output", "alpaca")
    system = _get(row, fm, "system", "alpaca", required=False)
    history = _get(row, fm, "history", "alpaca", kind=list, required=False) or []
    messages = [{"role": "system", "content": system}] if system else []
    for i, turn in enumerate(history, start=1):
        if not (isinstance(turn, list) and len(turn) == 2 and all(isinstance(t, str) for t in turn)):
            raise RowError(f"history turn {i} must be a [question, answer] pair of strings")
        messages += [{"role": "user", "content": turn[0]}, {"role": "assistant", "content": turn[1]}]
    prompt = f"{instruction}\n\n{extra}" if extra else instruction
    messages += [{"role": "user", "content": prompt}, {"role": "assistant", "content": output}]
    return Example("alpaca", messages=messages)


def _prompt_completion(row, fm) -> Example:
    prompt, completion = row.get(fm.get("prompt", "prompt")), row.get(fm.get("completion", "completion"))
    if isinstance(prompt, list) and isinstance(completion, list):  # conversational prompt-completion (TRL)
        return _conversation(prompt + completion, fm, "prompt-completion", sharegpt=False)
    prompt = _get(row, fm, "prompt", "prompt-completion")
    completion = _get(row, fm, "completion", "prompt-completion")
    return Example("prompt-completion", messages=[{"role": "user", "content": prompt},
                                                  {"role": "assistant", "content": completion}])


def _text(row, fm) -> Example:
    text = _get(row, fm, "text", "text")
    if not text.strip():
        raise RowError("empty text")
    return Example("text", text=text)


_NORMALIZERS = {"openai": _openai, "sharegpt": _sharegpt, "alpaca": _alpaca,
                "prompt-completion": _prompt_completion, "text": _text}
