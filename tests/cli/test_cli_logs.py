"""`yeto logs` reads what learners publish through their log handler (with their own credential) from a real
nats-server: every island's lines or one island's, following new ones until the run ends; the local files when
the stream has nothing; SkyPilot's log for a cloud island that never published; a bounded queue while the bus is away."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import subprocess
import sys
import threading

import pytest

from waiting import wait_for
from yeto.cli.main import main
from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus import connect
from yeto.infra.nats.server import NatsServer, ensure_streams, free_port
from yeto.infra.stack import StackPaths
from yeto.infra.tape.store import TapeStore
from yeto.learners.transport.logs import BusLogHandler
from yeto.schemas.base import to_bytes
from yeto.schemas.fleet import IslandUp
from yeto.schemas.subjects import LOG_STREAM, log_subject

RUN = "r-logs"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    users = bus_auth.prepare(state, tuple((run, f"island-{i}") for run in (RUN, "r-follow", "r-crash", "r-copy") for i in (0, 1)))
    srv = NatsServer(state / "nats", users_file=users).start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(state)))
        asyncio.run(_ensure(srv.url))
    yield srv, state
    srv.stop()


async def _ensure(url: str) -> None:
    bus = await connect(url, name="operator")
    await ensure_streams(bus)
    await bus.close()


def _learner_handler(server, monkeypatch, run: str, island: int, **kw) -> BusLogHandler:
    """The handler a learner installs, connected with that island's own credential (it connects at once)."""
    srv, state = server
    monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.learner_file(state, run, f"island-{island}")))
    handler = BusLogHandler(srv.url, run_id=run, learner=f"island-{island}", generation=0, **kw)
    assert handler.connected.wait(30), "the handler connects with the credential in the environment when it starts"
    return handler


def _logger(name: str, handler: logging.Handler) -> logging.Logger:
    log = logging.getLogger(f"yeto.test.{name}")
    log.handlers, log.propagate, log.level = [handler], False, logging.INFO
    return log


def _yeto(server, *argv: str, **kw) -> subprocess.CompletedProcess:
    srv, state = server
    env = {**os.environ, bus_auth.CREDS_ENV: str(bus_auth.operator_file(state))}
    return subprocess.run([sys.executable, "-m", "yeto.cli.main", "--state-dir", str(state / "home"), "--nats-url", srv.url,
                           *argv], capture_output=True, text=True, timeout=60, env=env, **kw)


@pytest.mark.timeout(120)
def test_learner_lines_reach_yeto_logs_every_island_or_one_with_secrets_masked(server, monkeypatch):
    for i in (0, 1):
        handler = _learner_handler(server, monkeypatch, RUN, i, secrets=("hunter2-hunter2",))
        log = _logger(f"island{i}", handler)
        for step in range(3):
            log.info("island %d step %d", i, step)
        log.warning("token is hunter2-hunter2")
        wait_for(lambda h=handler: h.num_sent == 4, 30, f"island {i}'s lines published")   # before the next island's
        handler.close()
    every = _yeto(server, "logs", RUN)
    assert every.returncode == 0, every.stderr
    lines = every.stdout.splitlines()
    assert len(lines) == 8 and "hunter2" not in every.stdout
    assert [line.split(" ", 1)[0] for line in lines] == ["[island-0]"] * 4 + ["[island-1]"] * 4   # stream order
    assert lines[0].endswith(" INFO yeto.test.island0: island 0 step 0") and lines[0].split()[1].endswith("Z")
    assert lines[3].endswith("WARNING yeto.test.island0: token is ***")
    one = _yeto(server, "logs", RUN, "--island", "1", "-n", "2")
    assert one.returncode == 0 and one.stdout.splitlines()[0].endswith("INFO yeto.test.island1: island 1 step 2")
    assert len(one.stdout.splitlines()) == 2 and "[island" not in one.stdout
    as_json = _yeto(server, "logs", RUN, "--json", "-n", "5")      # the same lines, one object each, for machines
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(o["source"], o["learner"]) for o in objects] == [("stream", "island-0")] + [("stream", "island-1")] * 4
    assert objects[-1]["line"].endswith("WARNING yeto.test.island1: token is ***")


@pytest.mark.timeout(120)
def test_follow_prints_a_line_published_after_it_started_and_ends_with_the_run(server, monkeypatch):
    from yeto.schemas.final import RunStopped

    run = "r-follow"
    handler = _learner_handler(server, monkeypatch, run, 1, every_s=0.05)
    log = _logger("follow", handler)
    log.info("before the follower")
    wait_for(lambda: handler.num_sent == 1, 30, "the first line published")
    srv, state = server
    env = {**os.environ, bus_auth.CREDS_ENV: str(bus_auth.operator_file(state))}
    follower = subprocess.Popen([sys.executable, "-m", "yeto.cli.main", "--nats-url", srv.url, "--state-dir",
                                 str(state / "home"), "logs", run, "--follow"], stdout=subprocess.PIPE, text=True, env=env)
    out: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [out.put(line.rstrip("\n")) for line in follower.stdout], daemon=True).start()
    try:
        assert out.get(timeout=30).endswith("yeto.test.follow: before the follower")
        log.info("after the follower started")
        assert out.get(timeout=30).endswith("yeto.test.follow: after the follower started")

        async def stop() -> None:
            monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(state)))
            bus = await connect(srv.url, name="operator")
            await bus.publish(RunStopped(run_id=run, source="test", reason="enough"))
            await bus.close()
        asyncio.run(stop())
        assert follower.wait(30) == 0                  # the run ended: so does the follower
    finally:
        follower.kill()
        handler.close()


CRASHING_LEARNER = """
import logging, os, sys
from yeto.learners.transport.logs_setup import install
install(sys.argv[1], run_id="r-crash", learner="island-0", generation=0)
logging.getLogger("yeto.learner").info("starting with %s and %s", os.environ["HF_TOKEN"], "wandb-secret-123456")
raise RuntimeError("out of memory in build")
"""


@pytest.mark.timeout(120)
def test_a_learners_crash_reaches_yeto_logs_with_its_traceback_and_no_secret(server, tmp_path):
    srv, state = server
    (tmp_path / "env.json").write_text('{"WANDB_API_KEY": "wandb-secret-123456"}')
    env = {**os.environ, bus_auth.CREDS_ENV: str(bus_auth.learner_file(state, "r-crash", "island-0")),
           "HF_TOKEN": "hf_abcdefghijklmnop", "YETO_ENV_FILE": str(tmp_path / "env.json")}
    crashed = subprocess.run([sys.executable, "-c", CRASHING_LEARNER, srv.url], capture_output=True, text=True,
                             timeout=60, env=env)
    assert crashed.returncode == 1 and crashed.stderr.count("Traceback") == 1   # stderr as without the handler
    done = _yeto(server, "logs", "r-crash")
    assert done.returncode == 0, done.stderr
    assert "INFO yeto.learner: starting with *** and ***" in done.stdout   # $HF_TOKEN, and a value of $YETO_ENV_FILE
    assert "CRITICAL yeto.learner: uncaught exception" in done.stdout and "RuntimeError: out of memory in build" in done.stdout


def test_with_nothing_on_the_bus_the_local_files_are_shown_and_it_says_so(server):
    logs = StackPaths(server[1] / "home").run_dir("r-files") / "logs"
    logs.mkdir(parents=True)
    (logs / "island-0.log").write_text("set up\ntraining\n")
    done = _yeto(server, "logs", "r-files")
    assert done.returncode == 0 and done.stdout == "set up\ntraining\n"
    assert "no log lines of run r-files on the bus; the local files under" in done.stderr
    as_json = _yeto(server, "logs", "r-files", "--json")
    assert [json.loads(line) for line in as_json.stdout.splitlines()] == [
        {"source": "file", "learner": None, "line": "set up"}, {"source": "file", "learner": None, "line": "training"}]


@pytest.mark.timeout(120)
def test_a_copied_back_runs_lines_are_read_from_its_files_once_its_bus_is_gone(server, monkeypatch, tmp_path, capsys):
    from yeto.infra.log_copy import save_run_logs

    for i in (0, 1):
        handler = _learner_handler(server, monkeypatch, "r-copy", i)
        _logger(f"copy{i}", handler).info("island %d trained", i)
        wait_for(lambda h=handler: h.num_sent == 1, 30, f"island {i}'s line published")
        handler.close()

    async def copy() -> int:
        monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(server[1])))
        bus = await connect(server[0].url)
        try:
            await save_run_logs(bus, tmp_path, "r-copy")
            return await save_run_logs(bus, tmp_path, "r-copy")     # again: the files are rewritten, not doubled
        finally:
            await bus.close()
    assert asyncio.run(copy()) == 2
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    assert main(["--state-dir", str(tmp_path), "logs", "r-copy"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["[island-0]", "[island-1]"] and lines[1].endswith("island 1 trained")


class RecordingSky:
    """SkyApi's jobs_logs (the only call `yeto logs` makes), answering what a job's set-up printed."""

    def jobs_logs(self, job_id: int) -> str:
        return f"job {job_id}: pip install failed\nERROR: no space left on device\n"


def test_a_skypilot_islands_job_log_is_shown_when_no_bus_has_its_lines(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    monkeypatch.setenv("YETO_SKY_API", f"{__name__}:RecordingSky")
    spec = {"cloud": "aws", "gpu": "A10G", "count": 1}
    events = [IslandUp(run_id="r-sky", source="launcher", island=i, spec=spec, backend=backend, handle=handle)
              for i, backend, handle in ((0, "skypilot", "17"), (1, "local", "4242"))]
    store = TapeStore(StackPaths(tmp_path).db)
    store.append([1, 2], [e.run_id for e in events], [to_bytes(e).decode() for e in events])
    store.close()
    assert main(["--state-dir", str(tmp_path), "logs", "r-sky"]) == 0
    said = capsys.readouterr()
    assert said.out == "[island-0] job 17: pip install failed\n[island-0] ERROR: no space left on device\n"
    assert "island 0 may have published lines, but no bus of the run answers; SkyPilot's log of its job 17" in said.err


def test_while_the_bus_is_away_lines_are_dropped_counted_and_said_once_it_is_back(tmp_path):
    port = free_port()
    handler = BusLogHandler(f"nats://127.0.0.1:{port}", run_id="r-away", learner="island-0", generation=0, max_queued=5)
    log = _logger("away", handler)
    for i in range(8):
        log.info("line %d", i)               # returns at once: nothing waits on the network
    assert handler.num_dropped == 3 and list(handler.lines)[0].endswith("line 3")
    srv = NatsServer(tmp_path / "nats", port=port).start()
    try:
        asyncio.run(_ensure(srv.url))
        wait_for(lambda: handler.num_sent == 6, 60, "the queued lines published once the server is up")
        handler.close()

        async def stored() -> tuple[bytes, object]:
            bus = await connect(srv.url)
            got = await bus.last(log_subject("r-away", "island-0"))
            info = await bus.js.stream_info(LOG_STREAM)
            await bus.close()
            assert got is not None
            return got[1], info.config
        payload, config = asyncio.run(stored())
    finally:
        srv.stop()
    lines = payload.decode().splitlines()
    assert lines[0] == "[3 log lines dropped while the bus was away]" and lines[1].endswith("line 3") and len(lines) == 6
    assert config.max_age == 7 * 24 * 3600 and config.max_bytes == 1024 ** 3   # the stream's limits, on the server
    assert getattr(config.discard, "value", config.discard) == "old"
