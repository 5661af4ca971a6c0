"""Shared fixtures: real nats-servers on free loopback ports with temporary stores: one for the session, one of
its own for a module marked `own_nats_server`, one per test for tests that kill or restart it (`fresh_nats`)."""
from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import configuration as hypothesis_configuration
from hypothesis import settings as hypothesis_settings

from yeto.infra.bus import Bus, connect
from yeto.infra.nats.server import NatsServer, ensure_streams

# Nothing of hypothesis's in the repository root: no example database, its caches in a temporary folder.
hypothesis_configuration.set_hypothesis_home_dir(tempfile.mkdtemp(prefix="yeto-hypothesis-"))
hypothesis_settings.register_profile("yeto", database=None)
hypothesis_settings.load_profile("yeto")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One OpenMP thread per process, for the test processes and every process they start (stacks, learners): the suite's
# two workers share two cores, and an island that sized its threads to the host's cores spun in OpenMP's barriers
# while the other worker held a core. Measured on 2026-12-06 during a full CI run (the box loaded as the suite loads
# it), the tiny learner's 16 steps (tests/learner/learner_tiny.py, `python -m yeto.learners.torch --no-sync`): 7.85 s
# with 2 threads, 0.21 s with 1 (and 11.3 against 6.6 CPU s for the whole process). torch reads it when it loads.
os.environ.setdefault("OMP_NUM_THREADS", "1")
PY = sys.executable


async def _ensure(url: str) -> None:
    bus = await connect(url, name="fixture")
    await ensure_streams(bus.js)
    await bus.close()


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "own_nats_server: the module's tests get a nats-server of their own (they "
                                       "read what the module's other tests leave in the streams: folds, durable consumers)")


def pytest_collection_modifyitems(config, items) -> None:
    """The files that hold a test marked `slow` (real runs, minutes each) first, each file's tests in their order:
    `make test` hands whole files to its two workers in this order (--dist loadfile --no-loadscope-reorder), so the
    long files start early and the many short ones even out the end, instead of a long file starting last."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


# Where the run's time went, per xdist worker (`make test` prints it after the durations): on the controller, each
# report's arrival time by worker and file. A worker's files are its spans, first report to last; its end, against the
# last worker's end, is its idle time at the end of the run (what --dist loadfile's order of files leaves).
_T0 = time.monotonic()
_SPANS: dict[str, dict[str, list[float]]] = {}


def pytest_runtest_logreport(report) -> None:
    node = getattr(report, "node", None)             # the WorkerController on xdist's controller; absent elsewhere
    if node is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    now = time.monotonic() - _T0
    span = _SPANS.setdefault(node.gateway.id, {}).setdefault(report.nodeid.split("::", 1)[0], [now - report.duration, now])
    span[1] = now


def pytest_terminal_summary(terminalreporter) -> None:
    if not _SPANS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("workers' time (tests/conftest.py)")
    ends = {w: max(s[1] for s in files.values()) for w, files in _SPANS.items()}
    last = max(ends.values())
    for w in sorted(_SPANS):
        files = sorted(_SPANS[w].items(), key=lambda kv: kv[1][1])
        busy = sum(b - a for a, b in (s for _, s in files))
        write(f"{w}: {len(files)} files, busy {busy:.0f} s, ended at {ends[w]:.0f} s, idle {last - ends[w]:.0f} s at the "
              f"end; its last files: " + ", ".join(f"{f} ({b - a:.0f} s, to {b:.0f} s)" for f, (a, b) in files[-3:]))
    spans = sorted(((b - a, f) for files in _SPANS.values() for f, (a, b) in files.items()), reverse=True)
    write("files by time on their worker: " + ", ".join(f"{f} {t:.0f} s" for t, f in spans[:25]))


def _started(store: Path) -> NatsServer:
    server = NatsServer(store).start()
    asyncio.run(_ensure(server.url))
    return server


@pytest.fixture(scope="session")
def session_nats_server(tmp_path_factory) -> NatsServer:
    server = _started(tmp_path_factory.mktemp("nats"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def nats_server(request, tmp_path_factory) -> NatsServer:
    """The session's server (tests keep apart by run id); a module marked `own_nats_server` gets a fresh one,
    so what its tests count in a stream or resume from a durable consumer is theirs alone."""
    if request.node.get_closest_marker("own_nats_server") is None:
        yield request.getfixturevalue("session_nats_server")
        return
    server = _started(tmp_path_factory.mktemp("nats-module"))
    yield server
    server.stop()


@pytest.fixture
def fresh_nats(tmp_path) -> NatsServer:
    """A nats-server of the test's own, for tests that kill or restart it."""
    server = _started(tmp_path / "nats")
    yield server
    server.stop()


@pytest.fixture
async def bus(nats_server) -> Bus:
    b = await connect(nats_server.url, name="test")
    yield b
    await b.close()


@pytest.fixture
def run_id(request) -> str:
    """A run id unique to the test, so tests sharing the session server never see each other's events."""
    import re
    import uuid

    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    return f"t-{stem}-{uuid.uuid4().hex[:6]}"
