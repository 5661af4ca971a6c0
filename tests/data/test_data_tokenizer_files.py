"""The data check's tokenizer without transformers (learners/data/tokenizer_files.py, chat_template.py) gives the
ids, labels and statistics transformers' tokenizer gives, and refuses (None) the folders it cannot read exactly."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FIXTURES, GENERATION_TEMPLATE, PLAIN_TEMPLATE, make_tokenizer
from yeto.infra.model_source import ModelSource
from yeto.learners.data import DataSpec, check_data, normalize
from yeto.learners.data.chat_template import compile_template, render_with_assistant_indices
from yeto.learners.data.tokenize import ChatEncoder
from yeto.learners.data.tokenizer_files import read_tokenizer

ROWS = [json.loads(line) for f in sorted(FIXTURES.glob("*.jsonl")) for line in f.read_text().splitlines()]
TRICKY = ("{% for m in messages %}{% if m.role == 'nobody' %}{{ raise_exception('no nobody <here>') }}{% endif %}"
          "{% if loop.index > 3 %}{% break %}{% endif %}{{ m.role }}: {{ m.content | tojson }}"
          "{% if m.role == 'assistant' %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endif %}\n"
          "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


def saved(tmp_path: Path, template: str, **config_changes) -> ModelSource:
    """A model folder holding the tokenizer as transformers saves it, with `config_changes` in tokenizer_config."""
    folder = tmp_path / "model"
    make_tokenizer(template).save_pretrained(folder)
    (folder / "config.json").write_text("{}")
    path = folder / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config_changes}))
    return ModelSource(location=str(folder))


def transformers_tokenizer(source: ModelSource):
    from yeto.learners.torch.model import load_tokenizer
    return load_tokenizer(source)


@pytest.mark.parametrize("template", [PLAIN_TEMPLATE, GENERATION_TEMPLATE], ids=["prefix-rendering", "markers"])
@pytest.mark.parametrize("train_on", ["assistant", "all"])
def test_file_tokenizer_encodes_every_row_as_transformers_does(tmp_path, template, train_on):
    source = saved(tmp_path, template)
    light, full = read_tokenizer(source), transformers_tokenizer(source)
    assert light is not None
    assert (light.special_tokens_map, light.eos_token_id, light.chat_template) == (
        full.special_tokens_map, full.eos_token_id, full.chat_template)
    examples = [normalize(r, "auto", None) for r in ROWS]
    want = ChatEncoder(full, train_on=train_on).encode(examples)
    got = ChatEncoder(light, train_on=train_on).encode(examples)
    assert [repr(x) for x in got] == [repr(x) for x in want]
    assert any(e.labels != e.input_ids for e in want if hasattr(e, "labels")) == (train_on == "assistant")


def test_data_check_reports_the_same_statistics_with_either_tokenizer(tmp_path):
    source = saved(tmp_path, PLAIN_TEMPLATE)
    spec = DataSpec(source=str(FIXTURES / "openai.jsonl"), seq_len=16)
    light = check_data(spec, read_tokenizer(source))
    full = check_data(spec, transformers_tokenizer(source))
    assert light.tokens == full.tokens and light.tokens.num_tokens > 0
    assert light.to_dict() == full.to_dict()


@pytest.mark.parametrize("template", [PLAIN_TEMPLATE, GENERATION_TEMPLATE, TRICKY])
def test_compiled_template_renders_as_transformers_compiles_it(template):
    from transformers.utils.chat_template_utils import _compile_jinja_template, _render_with_assistant_indices

    from yeto.learners.data.tokenize import _flatten_text_blocks
    conversations = [[_flatten_text_blocks(m) for m in normalize(r, "auto", None).messages] for r in ROWS
                     if "messages" in r]
    conversations.append([{"role": "user", "content": 'say "<b>" & \u00e9'}, {"role": "assistant", "content": "ok"}] * 3)
    for messages in conversations:
        for prompt in (False, True):
            ours = render_with_assistant_indices(compile_template(template), messages, None, None, prompt, eos_token="E")
            theirs = _render_with_assistant_indices(_compile_jinja_template(template), messages, None, None, prompt,
                                                    eos_token="E")
            assert ours == theirs and ours[0]


def test_template_errors_are_the_templates_own_words():
    import jinja2
    with pytest.raises(jinja2.TemplateError, match="no nobody <here>"):
        compile_template(TRICKY).render(messages=[{"role": "nobody", "content": "x"}])


@pytest.mark.parametrize("change", [
    {"tokenizer_class": "LlamaTokenizer"},          # v5 rebuilds a class of its own from vocab and merges
    {"add_bos_token": True},                        # transformers rewrites the post-processor
    {"eos_token": "<|not-added|>"},                 # transformers adds the token
    {"additional_special_tokens": ["<|im_start|>", "<new>"]},
    {"chat_template": [{"name": "default", "template": "x"}, {"name": "tool_use", "template": "y"}]},
    {"split_special_tokens": True},
], ids=lambda c: next(iter(c)))
def test_folders_only_transformers_reads_exactly_fall_back(tmp_path, change):
    source = saved(tmp_path, PLAIN_TEMPLATE, **change)
    if "chat_template" in change:
        (Path(source.location) / "chat_template.jinja").unlink(missing_ok=True)
    assert read_tokenizer(source) is None


def test_gguf_legacy_files_and_unreadable_json_fall_back(tmp_path):
    source = saved(tmp_path, PLAIN_TEMPLATE)
    folder = Path(source.location)
    assert read_tokenizer(source) is not None
    assert read_tokenizer(ModelSource(location=str(folder), gguf_file="m.gguf")) is None
    (folder / "special_tokens_map.json").write_text("{}")
    assert read_tokenizer(source) is None
    (folder / "special_tokens_map.json").unlink()
    (folder / "tokenizer.json").write_text("{not json")
    assert read_tokenizer(source) is None
