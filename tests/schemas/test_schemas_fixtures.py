"""Golden fixtures: every shipped message type and version has one, and every one still parses."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import gen_fixtures

from yeto.schemas import SchemaError, parse, registry

FIXTURE_FILES = sorted(gen_fixtures.FIXTURES.glob("*.json"))


def test_every_shipped_type_and_version_has_a_golden_fixture():
    missing = [k for k in gen_fixtures.shipped_classes() if not gen_fixtures.fixture_path(*k).exists()]
    assert not missing, f"run `python scripts/gen_fixtures.py` to add fixtures for {missing}"


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.stem for p in FIXTURE_FILES])
def test_golden_fixture_parses_to_its_latest_version(path: Path):
    data = json.loads(path.read_text())
    msg = parse(path.read_bytes())
    assert msg.type == data["type"] and msg.version == registry.latest[data["type"]]
    if data["version"] == msg.version:  # same version: the round trip is lossless
        assert json.loads(msg.model_dump_json()) == data


def test_unknown_fields_are_ignored_by_readers():
    data = json.loads(gen_fixtures.fixture_path("ServiceStarted", 1).read_text())
    assert parse({**data, "added_in_a_later_release": 1}) == parse(data)


@pytest.mark.parametrize("raw, reason", [
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"type": "Nope", "version": 1}', "unknown message type 'Nope'"),
    (b'{"type": "ServiceStarted"}', "integer 'version'"),
    (b'{"type": "ServiceStarted", "version": 2}', "v2 is newer than this Yeto knows"),
    (b'{"type": "ServiceStarted", "version": 1, "service": "s"}', "failed validation at 'instance'"),
])
def test_unparsable_messages_raise_schema_error_with_the_reason(raw, reason):
    with pytest.raises(SchemaError, match=reason):
        parse(raw)


def test_an_old_version_is_upcast_when_read():
    from typing import Literal

    from yeto.schemas.base import Event, Registry

    reg = Registry()

    @reg.register
    class Old(Event):
        type: Literal["Thing"] = "Thing"
        version: Literal[1] = 1
        n: int

    @reg.register
    class New(Event):
        type: Literal["Thing"] = "Thing"
        version: Literal[2] = 2
        n: int
        unit: str

    reg.upcaster("Thing", 1)(lambda d: {**d, "unit": "tokens"})
    msg = reg.parse({"type": "Thing", "version": 1, "n": 3})
    assert isinstance(msg, New) and msg.unit == "tokens" and msg.n == 3
