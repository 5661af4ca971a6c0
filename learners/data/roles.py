"""One message of any dialect -> a canonical message (system/user/assistant/tool), tool calls and blocks kept."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from yeto.learners.data.rows import json_type

ROLE_ALIASES = {
    "system": "system", "developer": "system",
    "user": "user", "human": "user", "prompter": "user",
    "assistant": "assistant", "gpt": "assistant", "bot": "assistant", "model": "assistant", "chatgpt": "assistant",
    "tool": "tool", "function": "tool", "observation": "tool", "ipython": "tool", "tool_response": "tool",
    "function_call": "assistant",  # a ShareGPT tool call: the value is {"name", "arguments"} JSON
}
KEPT_KEYS = ("name", "tool_call_id", "reasoning_content", "thinking")


class RowError(ValueError):
    """Why one row cannot be used; the caller adds the file and row number."""


def role_of(raw: str, field_map: Mapping[str, str]) -> str:
    for tag, custom in field_map.items():
        if tag.endswith("_tag") and custom == raw:
            return tag.removesuffix("_tag")
    return ROLE_ALIASES.get(raw.strip().lower(), "")


def normalize_message(raw: Any, number: int, field_map: Mapping[str, str], *, sharegpt: bool) -> dict:
    """`number` is 1-based, as the user would count the messages of the row."""
    if not isinstance(raw, dict):
        raise RowError(f"message {number}: expected an object, got {json_type(raw)}")
    role_key = field_map.get("from" if sharegpt else "role", "from" if sharegpt else "role")
    content_key = field_map.get("value" if sharegpt else "content", "value" if sharegpt else "content")
    raw_role = raw.get(role_key)
    if not isinstance(raw_role, str):
        raise RowError(f"message {number}: missing {role_key!r}" if raw_role is None else
                       f"message {number}: {role_key!r} must be a string, got {json_type(raw_role)}")
    role = role_of(raw_role, field_map)
    if not role:
        raise RowError(f"message {number}: unknown role {raw_role!r}; use system, user, assistant or tool "
                       "(or an alias: "
                       f"{', '.join(a for a in ROLE_ALIASES if a not in ('system', 'user', 'assistant', 'tool'))}), "
                       f"or map it with --field-map assistant_tag={raw_role}")
    message: dict[str, Any] = {"role": role}
    content = raw.get(content_key)
    if raw_role.strip().lower() == "function_call" and role == "assistant":
        message["content"] = ""
        message["tool_calls"] = [_tool_call_from_json(content, number)]
        return message
    tool_calls = raw.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant" or not isinstance(tool_calls, list):
            raise RowError(f"message {number}: tool_calls must be a list on an assistant message")
        message["tool_calls"] = [_tool_call(c, number) for c in tool_calls]
    message["content"] = _content(content, number, content_key, allow_empty="tool_calls" in message)
    for key in KEPT_KEYS:
        if raw.get(key) is not None:
            message[key] = raw[key]
    return message


def _content(content: Any, number: int, key: str, *, allow_empty: bool) -> Any:
    if isinstance(content, str):
        return content
    if content is None:
        if allow_empty:
            return ""
        raise RowError(f"message {number}: missing {key!r}")
    if isinstance(content, list):  # content blocks: text, image_url, image, audio, ... kept as they are
        for i, block in enumerate(content, start=1):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise RowError(f"message {number}: content block {i} needs a string 'type'")
            if block["type"] == "text" and not isinstance(block.get("text"), str):
                raise RowError(f"message {number}: text block {i} needs a string 'text'")
        return [{k: v for k, v in b.items() if v is not None} for b in content]
    raise RowError(f"message {number}: {key!r} must be a string or a list of content blocks, got {json_type(content)}")


def _tool_call(call: Any, number: int) -> dict:
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise RowError(f"message {number}: each tool call needs a function name")
    arguments = fn.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI sends a JSON string; chat templates expect the object
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise RowError(f"message {number}: tool call {fn['name']!r} has arguments that are not valid JSON") from None
    out = {"type": "function", "function": {"name": fn["name"], "arguments": arguments}}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    return out


def _tool_call_from_json(value: Any, number: int) -> dict:
    try:
        call = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        call = None
    if not isinstance(call, dict) or "name" not in call:
        raise RowError(f"message {number}: a function_call value must be JSON with 'name' and 'arguments'")
    return _tool_call(call, number)
