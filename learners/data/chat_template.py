"""A chat template compiled as transformers compiles it (same Jinja environment), without importing transformers.

The CLI's data check renders every row before anything is rented; importing transformers for this (it pulls in
torch) took most of `yeto launch`'s own seconds (benchmarks/startup.py). The environment below is transformers'
(`utils/chat_template_utils.py`, 5.x): sandboxed, trim_blocks and lstrip_blocks, loop controls, its `tojson`,
`raise_exception` and `strftime_now`, and the `{% generation %}` tag that records the assistant spans.
tests/data/test_data_chat_template.py renders the same conversations with both and compares the text and spans.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: the character span of the enclosed text, while a tracker is active."""

    tags = {"generation"}

    def __init__(self, environment: jinja2.Environment) -> None:
        super().__init__(environment)
        environment.extend(activate_tracker=self.activate_tracker)
        self._rendered_blocks: list[str] | None = None
        self._generation_indices: list[tuple[int, int]] | None = None

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context: jinja2.nodes.EvalContext, caller: jinja2.runtime.Macro) -> str:
        rv = caller()
        if self._rendered_blocks is not None and self._generation_indices is not None:
            start = len("".join(self._rendered_blocks))
            self._generation_indices.append((start, start + len(rv)))
        return rv

    @contextmanager
    def activate_tracker(self, rendered_blocks: list[str], generation_indices: list) -> Iterator[None]:
        assert self._rendered_blocks is None, "one render at a time per compiled template"
        self._rendered_blocks, self._generation_indices = rendered_blocks, generation_indices
        try:
            yield
        finally:
            self._rendered_blocks = self._generation_indices = None


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja's own filter escapes HTML characters; transformers' (and so every template's author) does not
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.now().strftime(format)


@lru_cache
def compile_template(chat_template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(chat_template)


def render_with_assistant_indices(compiled: jinja2.Template, messages, tools, documents, add_generation_prompt,
                                  **template_kwargs) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans of its `{% generation %}` blocks."""
    blocks: list[str] = []
    spans: list[tuple[int, int]] = []
    with compiled.environment.activate_tracker(blocks, spans):
        for block in compiled.generate(messages=messages, tools=tools, documents=documents,
                                       add_generation_prompt=add_generation_prompt, **template_kwargs):
            blocks.append(block)
    return "".join(blocks), spans
