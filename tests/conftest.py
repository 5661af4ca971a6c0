"""Shared fixtures: a real nats-server per test session on a free loopback port with a temporary store."""
from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from yeto.infra.bus import Bus
from yeto.infra.natsserver import NatsServer, ensure_streams

import tempfile  # noqa: E402

from hypothesis import configuration as hypothesis_configuration  # noqa: E402
from hypothesis import settings as hypothesis_settings  # noqa: E402

# Nothing of hypothesis's in the repository root: no example database, its caches in a temporary folder.
hypothesis_configuration.set_hypothesis_home_dir(tempfile.mkdtemp(prefix="yeto-hypothesis-"))
hypothesis_settings.register_profile("yeto", database=None)
hypothesis_settings.load_profile("yeto")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
PY = sys.executable


async def _ensure(url: str) -> None:
    bus = await Bus.connect(url, name="fixture")
    await ensure_streams(bus.js)
    await bus.close()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory) -> NatsServer:
    server = NatsServer(tmp_path_factory.mktemp("nats")).start()
    asyncio.run(_ensure(server.url))
    yield server
    server.stop()


@pytest.fixture
def fresh_nats(tmp_path) -> NatsServer:
    """A nats-server of the test's own, for tests that kill or restart it."""
    server = NatsServer(tmp_path / "nats").start()
    asyncio.run(_ensure(server.url))
    yield server
    server.stop()


@pytest.fixture
async def bus(nats_server) -> Bus:
    b = await Bus.connect(nats_server.url, name="test")
    yield b
    await b.close()


@pytest.fixture
def run_id(request) -> str:
    """A run id unique to the test, so tests sharing the session server never see each other's events."""
    import re
    import uuid

    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    return f"t-{stem}-{uuid.uuid4().hex[:6]}"
