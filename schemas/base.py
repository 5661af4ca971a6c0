"""Base message types, the one registry that parses any message by (type, version), and upcasting.

Tolerant readers, strict writers: parsing ignores unknown fields; messages are created only through
their frozen model. An old version is upcast to the newest when read, never edited on the tape.
"""
from __future__ import annotations

import builtins
import json
import re
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

_NAMESPACE = uuid.UUID("6f1c2a4e-59d1-4c1b-9a63-7e0c0d5e2b10")
# One NATS subject token, one path component, safe in a config file and a shell word: no '.', '/', '*', '>', space.
RUN_ID_PATTERN = "[a-z0-9][a-z0-9-]{0,62}"
RUN_ID_RE = re.compile(RUN_ID_PATTERN)   # use .fullmatch (a '$' would let a trailing newline through)
SYSTEM_RUN = "_"  # run_id of messages that belong to no run (service lifecycle, rejections of unparsable input)


class SchemaError(ValueError):
    """A message that can never be parsed: bad JSON, unknown type or version, or failed validation."""

    def __init__(self, reason: str, *, type: str | None = None, version: int | None = None):
        super().__init__(reason)
        self.reason, self.type, self.version = reason, type, version


def check_run_id(run_id: object) -> str:
    """`run_id` if it is a run id (1-63 of a-z, 0-9, '-', not starting with '-'), else ValueError saying so."""
    if isinstance(run_id, str) and RUN_ID_RE.fullmatch(run_id):
        return run_id
    if isinstance(run_id, str) and RUN_ID_RE.fullmatch(run_id.lower()):
        raise ValueError(f"{run_id!r} is not a run id: run ids are lowercase (letters, digits and '-'); "
                         f"use {run_id.lower()!r} (pattern {RUN_ID_PATTERN})")
    raise ValueError(f"{repr(run_id)[:80]} is not a run id: use 1-63 lowercase letters, digits and '-', starting with a letter "
                     f"or digit (pattern {RUN_ID_PATTERN})")


def new_id() -> str:
    return uuid.uuid4().hex


def derive_id(*parts: object) -> str:
    """A message id derived from its cause, so a redelivered cause re-publishes the same id (deduplicated)."""
    return uuid.uuid5(_NAMESPACE, "\x1f".join(str(p) for p in parts)).hex


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


M = TypeVar("M", bound="Message")


class Message(BaseModel):
    """Fields every command and event carries. Subclasses set `type` and `version` as Literals."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: ClassVar[str] = "message"
    type: str
    version: int
    id: str = Field(default_factory=new_id)
    run_id: str = SYSTEM_RUN
    ts: datetime = Field(default_factory=utcnow)
    causation_id: str | None = None
    source: str = "unknown"

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str) -> str:
        return value if value == SYSTEM_RUN else check_run_id(value)

    def caused(self, cls: builtins.type[M], key: object = "", **fields: Any) -> M:   # `type` is a field here
        """Create a message caused by this one, its id derived from (this id, the new type, key)."""
        fields.setdefault("run_id", self.run_id)
        return cls(id=derive_id(self.id, cls.model_fields["type"].default, key), causation_id=self.id, **fields)


class Command(Message):
    """What a user or a service asks for. Handled by exactly one instance of the owning service."""

    kind: ClassVar[str] = "command"
    owner: ClassVar[str] = ""  # the service that handles it: planner, launcher, syncer, finalizer


class Event(Message):
    """What happened. Appended to the event stream and the tape, never changed."""

    kind: ClassVar[str] = "event"


Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class Registry:
    """Every message class by (type, version), plus upcasters from each old version to the next."""

    def __init__(self) -> None:
        self.classes: dict[tuple[str, int], type[Message]] = {}
        self.latest: dict[str, int] = {}
        self.upcasters: dict[tuple[str, int], Upcaster] = {}

    def register(self, cls: type[M]) -> type[M]:
        type_, version = cls.model_fields["type"].default, cls.model_fields["version"].default
        assert isinstance(type_, str) and isinstance(version, int), f"{cls.__name__} needs type/version defaults"
        assert (type_, version) not in self.classes, f"{type_} v{version} registered twice"
        self.classes[(type_, version)] = cls
        self.latest[type_] = max(version, self.latest.get(type_, 0))
        return cls

    def upcaster(self, type_: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        def deco(fn: Upcaster) -> Upcaster:
            self.upcasters[(type_, from_version)] = fn
            return fn
        return deco

    def parse(self, raw: bytes | str | dict[str, Any]) -> Message:
        if isinstance(raw, dict):
            data = dict(raw)
        else:
            try:
                data = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise SchemaError(f"not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise SchemaError(f"a message must be a JSON object, got {type(data).__name__}")
        type_, version = data.get("type"), data.get("version")
        if not isinstance(type_, str) or not isinstance(version, int):
            raise SchemaError("a message needs a string 'type' and an integer 'version'", type=type_)
        if type_ not in self.latest:
            raise SchemaError(f"unknown message type {type_!r}", type=type_, version=version)
        latest = self.latest[type_]
        if version > latest:
            raise SchemaError(f"{type_} v{version} is newer than this Yeto knows (v{latest}); upgrade yeto",
                              type=type_, version=version)
        while version < latest:
            if (type_, version) in self.upcasters:
                data = self.upcasters[(type_, version)](data)
                version = data["version"] = version + 1
            elif (type_, version) in self.classes:  # no upcaster: the old class still parses it as is
                break
            else:
                raise SchemaError(f"{type_} v{version} is unknown", type=type_, version=version)
        try:
            return self.classes[(type_, version)].model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise SchemaError(f"{type_} v{version} failed validation at {where!r}: {first['msg']}",
                              type=type_, version=version) from None

    def of_kind(self, kind: str) -> list[type[Message]]:
        return [c for c in self.classes.values() if c.kind == kind]


registry = Registry()
parse = registry.parse


def to_bytes(msg: Message) -> bytes:
    return msg.model_dump_json().encode()
