"""Format detection and normalization: every format, role aliases, tool calls, blocks, field maps, bad rows."""
from __future__ import annotations

import pytest

from yeto.learners.data import DataSpec, RowError, normalize, parse_field_map


def test_openai_keeps_tool_calls_and_parses_string_arguments():
    ex = normalize({"messages": [{"role": "user", "content": "hi"},
                                 {"role": "assistant", "content": None,
                                  "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
                                 {"role": "tool", "tool_call_id": "c1", "content": "2"},
                                 {"role": "assistant", "content": "done"}], "tools": [{"type": "function"}]})
    assert ex.format == "openai" and ex.tools == [{"type": "function"}]
    assert ex.messages[1] == {"role": "assistant", "content": "",
                              "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}, "id": "c1"}]}
    assert ex.messages[2] == {"role": "tool", "content": "2", "tool_call_id": "c1"}


def test_sharegpt_aliases_function_call_observation_and_system():
    ex = normalize({"system": "S", "conversations": [
        {"from": "human", "value": "q"}, {"from": "function_call", "value": "{\"name\": \"add\", \"arguments\": {}}"},
        {"from": "observation", "value": "5"}, {"from": "gpt", "value": "a"}]})
    assert [m["role"] for m in ex.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert ex.messages[2]["tool_calls"][0]["function"]["name"] == "add"


def test_alpaca_with_input_and_history():
    ex = normalize({"instruction": "Translate", "input": "Hello", "output": "Bonjour", "history": [["Hi", "Salut"]]})
    assert ex.messages == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Salut"},
                           {"role": "user", "content": "Translate\n\nHello"}, {"role": "assistant", "content": "Bonjour"}]


def test_prompt_completion_plain_and_conversational_and_text():
    assert normalize({"prompt": "p", "completion": "c"}).messages[1] == {"role": "assistant", "content": "c"}
    conv = normalize({"prompt": [{"role": "user", "content": "p"}], "completion": [{"role": "assistant", "content": "c"}]})
    assert conv.format == "prompt-completion" and len(conv.messages) == 2
    assert normalize({"text": "hello"}).text == "hello"


def test_content_blocks_preserved_and_developer_is_system():
    blocks = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}]
    ex = normalize({"messages": [{"role": "developer", "content": "d"}, {"role": "user", "content": blocks},
                                 {"role": "bot", "content": "ok"}]})
    assert ex.messages[0]["role"] == "system" and ex.messages[1]["content"] == blocks and ex.messages[2]["role"] == "assistant"


def test_field_map_renames_keys_and_roles():
    fm = parse_field_map("messages=dialog,role=speaker,content=text,user_tag=customer,assistant_tag=agent")
    ex = normalize({"dialog": [{"speaker": "customer", "text": "q"}, {"speaker": "agent", "text": "a"}]}, "auto", fm)
    assert ex.messages == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


@pytest.mark.parametrize("row,fmt,reason", [
    ({"messages": []}, "auto", "empty conversation"),
    ({"messages": [{"role": "narrator", "content": "x"}]}, "auto", "message 1: unknown role 'narrator'"),
    ({"messages": [{"role": "user", "content": 3}]}, "auto",
     "message 1: 'content' must be a string or a list of content blocks, got a number"),
    ({"messages": [{"role": "user", "content": "q"}]}, "auto", "no assistant message to train on"),
    ({"messages": ["hi"]}, "auto", "message 1: expected an object, got a string"),
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [{"text": "x"}]}]}, "auto",
     "message 2: content block 1 needs a string 'type'"),
    ({"conversations": [{"from": "function_call", "value": "not json"}]}, "auto",
     "message 1: a function_call value must be JSON with 'name' and 'arguments'"),
    ({"a": 1}, "auto", "no known format in keys ['a']"),
    ({"messages": [{"role": "user", "content": "q"}], "instruction": "i", "output": "o"}, "auto",
     "ambiguous row: it matches openai and alpaca; pass --data-format to choose"),
    ({"instruction": "i", "output": None}, "alpaca", "missing 'output' (needed by --data-format alpaca)"),
    ({"instruction": "i", "output": 5}, "alpaca", "'output' must be a string, got a number"),
    ({"text": "  "}, "auto", "empty text"),
])
def test_bad_rows_have_exact_reasons(row, fmt, reason):
    with pytest.raises(RowError) as e:
        normalize(row, fmt)
    assert str(e.value).startswith(reason)


def test_forced_format_and_spec_validation():
    ex = normalize({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                    "text": "rendered"}, "openai")
    assert ex.format == "openai"
    with pytest.raises(ValueError, match="unknown --data-format 'csv'"):
        DataSpec(source="x", data_format="csv")
    with pytest.raises(ValueError, match="--field-map: unknown key 'dialog'"):
        parse_field_map("dialog=messages")
    with pytest.raises(ValueError, match="expected key=value"):
        parse_field_map("messages")
