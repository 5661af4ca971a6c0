"""Limits against hostile input: a huge SQL answer is refused within the bus budget without being built whole, the
tape's query connections reach no file, URL or extension, data reading survives huge lines and deep nesting,
every stream is capped on the real server, and an unreachable bus ends the CLI in one line."""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import tracemalloc

import pytest

from yeto.cli.main import main
from yeto.infra.bus import connect
from yeto.infra.nats.server import ensure_streams, free_port
from yeto.infra.stack import StackPaths
from yeto.infra.tape.sql import ask
from yeto.infra.tape.store import TapeStore
from yeto.learners.data import DataSpec, check_data
from yeto.learners.data.jsonl import MAX_LINE_BYTES, JsonlFile
from yeto.schemas.subjects import MAX_PAYLOAD, STREAMS, StreamSpec

pytestmark = pytest.mark.timeout(180)

BIG = "SELECT i, repeat('x', 1000) AS pad FROM range(100000) t(i)"   # ~100 MB as JSON: twelve times the bus limit
GOOD_ROW = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def peak_rss_mib(pid: int) -> float:
    """The process's high-water mark of resident memory (VmHWM), in MiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def mib(setting: str) -> float:
    number, unit = setting.split()
    return float(number) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "TiB": 1024 ** 2}[unit]


async def _answering(bus) -> None:
    """Ask until the writer answers (the pause only paces the questions; what the test waits on is the answer)."""
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        try:
            await ask(bus, "SELECT 1", timeout=2)
            return
        except ValueError:
            assert asyncio.get_running_loop().time() < deadline, "the tape writer never answered"
            await asyncio.sleep(0.05)


async def test_a_100k_row_answer_is_refused_within_the_bus_budget_without_building_it_whole(fresh_nats, tmp_path):
    log = open(tmp_path / "tape.log", "ab")
    writer = subprocess.Popen([sys.executable, "-m", "yeto.infra.tape", "--nats-url", fresh_nats.url,
                               "--db", str(tmp_path / "tape.duckdb")], stdout=log, stderr=subprocess.STDOUT)
    bus = await connect(fresh_nats.url, name="test")
    try:
        await _answering(bus)
        before = peak_rss_mib(writer.pid)
        with pytest.raises(ValueError, match=r"passed \d+ bytes, the most one reply carries on the bus, after") as refused:
            await ask(bus, BIG)
        after = peak_rss_mib(writer.pid)
        rows = int(re.search(r"after (\d+) rows", str(refused.value)).group(1))
        assert 0 < rows < 100_000 and rows * 1000 < MAX_PAYLOAD, "refused as the budget ran out, not after all rows"
        assert after - before < 64, f"the writer's peak memory grew {after - before:.0f} MiB for a refused answer"
        whole = await ask(bus, "SELECT i FROM range(100000) t(i)")   # 100k small rows fit: streamed, not refused
        assert len(whole["rows"]) == 100_000 and not whole["truncated"]
        assert (await ask(bus, BIG, max_rows=5))["truncated"]
        (limit, spill, external, autoload), = (await ask(bus, "SELECT current_setting('memory_limit'), "
            "current_setting('max_temp_directory_size'), current_setting('enable_external_access'), "
            "current_setting('autoload_known_extensions')"))["rows"]
        assert mib(limit) <= 1024 and mib(spill) <= 4 * 1024 and external is False and autoload is False
        with pytest.raises(ValueError, match="read-only: SET"):
            await ask(bus, "SET memory_limit = '100GB'")
        with pytest.raises(ValueError, match="no files, URLs or extensions"):
            await ask(bus, "SELECT * FROM glob('/etc/*')")
    finally:
        writer.terminate()
        assert writer.wait(10) == 0
        await bus.close()


@pytest.fixture
def offline_state(tmp_path, monkeypatch):
    """A state directory with a tape and no stack running."""
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    TapeStore(StackPaths(tmp_path).db).close()
    return tmp_path


@pytest.mark.parametrize("sql, says", [
    ("SELECT * FROM read_csv('/etc/passwd')", "no files, URLs or extensions"),
    ("SELECT * FROM glob('/etc/*')", "no files, URLs or extensions"),
    ("SELECT * FROM read_text('/etc/hostname')", "no files, URLs or extensions"),
    ("SELECT * FROM 'https://example.com/x.parquet'", "no files, URLs or extensions"),
    ("INSTALL httpfs", "read-only: LOAD"),
    ("LOAD httpfs", "read-only: LOAD"),
    ("SET enable_external_access = true", "read-only: SET"),
])
def test_offline_sql_reads_no_file_url_or_extension(offline_state, capsys, sql, says):
    assert main(["--state-dir", str(offline_state), "sql", sql]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and "root:" not in err


def test_offline_sql_runs_with_the_configuration_locked_and_capped(offline_state, capsys):
    sql = ("SELECT current_setting('enable_external_access') AS ext, current_setting('autoinstall_known_extensions') AS inst, "
           "current_setting('autoload_known_extensions') AS load, current_setting('lock_configuration') AS locked, "
           "current_setting('memory_limit') AS mem")
    assert main(["--state-dir", str(offline_state), "sql", sql, "--format", "json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)
    assert (got["ext"], got["inst"], got["load"], got["locked"]) == (False, False, False, True) and mib(got["mem"]) <= 1024


def test_a_jsonl_line_over_the_cap_is_a_bad_row_with_its_line_number(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps(GOOD_ROW) + "\n")
        f.write('{"text": "' + "x" * MAX_LINE_BYTES + '"}\n')
        f.write(json.dumps(GOOD_ROW) + "\n")
    report = check_data(DataSpec(source=str(path)))
    assert (report.num_rows, report.num_bad) == (3, 1)
    assert report.bad_rows[0].ref == 2 and f"longer than {MAX_LINE_BYTES} bytes" in report.bad_rows[0].reason
    rows = JsonlFile(str(path), lambda: open(path, "rb"))
    assert len(rows) == 3 and [r.ref for r in rows.get_many([1, 2])] == [2, 3] and rows.get_many([1])[0].error


def test_reading_past_an_over_long_line_never_holds_it(tmp_path):
    path = tmp_path / "long.jsonl"
    with open(path, "w") as f:
        f.write('{"text": "' + "y" * (20 << 20) + '"}\n' + json.dumps({"text": "ok"}) + "\n")
    tracemalloc.start()
    try:
        rows = list(JsonlFile(str(path), lambda: open(path, "rb"), max_line=4096))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(r.ref, r.error is not None) for r in rows] == [(1, True), (2, False)]
    assert peak < 4 << 20, f"reading a 20 MiB line past a 4 KiB cap peaked at {peak >> 20} MiB"


def test_deeply_nested_json_becomes_bad_rows_not_a_traceback(tmp_path, capsys):
    path = tmp_path / "deep.jsonl"
    deep_args = json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a",
                            "tool_calls": [{"function": {"name": "f", "arguments": "[" * 50_000}}]}]})
    path.write_text("\n".join([json.dumps(GOOD_ROW), '{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}",
                               '{"text": ' + "9" * 5000 + "}", deep_args, json.dumps(GOOD_ROW)]) + "\n")
    assert main(["data", "check", "--data", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "line 2: JSON nested too deeply" in out and "line 3: not readable JSON" in out and "line 4: nested too deeply" in out
    assert "rows: 5 (2 good, 3 bad)" in out and "Traceback" not in err
    array = tmp_path / "deep.json"
    array.write_text("[" * 100_000 + "]" * 100_000)     # streamed (jsonarray.py): its one row is a bad row
    assert main(["data", "check", "--data", str(array)]) == 1
    out, err = capsys.readouterr()
    assert "row 0: JSON nested too deeply" in out and "Traceback" not in err


async def test_every_stream_is_capped_on_the_real_server(nats_server):
    bus = await connect(nats_server.url, name="test")
    try:
        await ensure_streams(bus.js)
        for spec in STREAMS:
            config = (await bus.js.stream_info(spec.name)).config
            assert config.max_bytes == spec.max_bytes > 0 and config.max_msgs == spec.max_msgs > 0, spec.name
            assert getattr(config.discard, "value", config.discard) == spec.discard, spec.name
        tiny = StreamSpec("SEC_TINY", ("sec.tiny.>",), max_bytes=1 << 20, max_msgs=5, description="a cap to hit")
        await ensure_streams(bus.js, (tiny,))
        for i in range(5):
            await bus.js.publish("sec.tiny.x", b"m%d" % i)
        with pytest.raises(Exception, match="maximum messages exceeded"):   # discard new: the flood is refused
            await bus.js.publish("sec.tiny.x", b"one too many")
        assert (await bus.js.stream_info("SEC_TINY")).state.messages == 5
        await bus.js.delete_stream("SEC_TINY")
    finally:
        await bus.close()


def test_an_unreachable_bus_ends_the_cli_in_one_line(tmp_path):
    url = f"nats://127.0.0.1:{free_port()}"
    done = subprocess.run([sys.executable, "-m", "yeto.cli.main", "--state-dir", str(tmp_path), "--nats-url", url,
                           "down", "r1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"yeto: error: cannot reach NATS at {url}") and "Traceback" not in done.stderr
