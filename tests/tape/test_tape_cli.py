"""The read side of the CLI with the stack down: `yeto sql`, `tape show|replay`, `status`, `logs` read the files."""
from __future__ import annotations

import csv
import io
import json
import threading

import pytest

from tape_events import scripted_run, write_tape
from waiting import wait_for
from yeto.cli.logs_files import follow_logs, log_files
from yeto.cli.main import main
from yeto.infra.stack import StackPaths


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A state directory whose tape holds two scripted runs, with no stack running."""
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    return write_tape(tmp_path, scripted_run("r-one") + scripted_run("r-two")[:6])


def yeto(state, *argv) -> int:
    return main(["--state-dir", str(state), *argv])


def test_sql_prints_an_aligned_table_csv_and_json(state, capsys):
    sql = "SELECT run_id, count(*) AS n FROM events GROUP BY 1 ORDER BY 1"
    assert yeto(state, "sql", sql) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["run_id", "n"] and lines[2].split() == ["r-one", "15"] and lines[-1] == "(2 rows)"
    assert lines[2].index("15") + 2 == len(lines[0]) or lines[2].endswith("15")   # numbers right-aligned
    assert yeto(state, "sql", sql, "--format", "csv") == 0
    assert list(csv.reader(io.StringIO(capsys.readouterr().out))) == [["run_id", "n"], ["r-one", "15"], ["r-two", "6"]]
    assert yeto(state, "sql", sql, "--format", "json") == 0
    assert json.loads(capsys.readouterr().out) == [{"run_id": "r-one", "n": 15}, {"run_id": "r-two", "n": 6}]


def test_sql_refuses_writes_and_says_why(state, capsys):
    assert yeto(state, "sql", "DROP TABLE events") == 2
    assert "read-only: DROP" in capsys.readouterr().err


def test_sql_without_a_tape_tells_what_to_do(tmp_path, capsys):
    assert main(["--state-dir", str(tmp_path), "sql", "SELECT 1"]) == 2
    err = capsys.readouterr().err
    assert "no tape at" in err and f"no local stack has run under {tmp_path}." in err
    assert "`yeto launch ... --gpu local:1xcpu,local:1xcpu` starts one" in err and "stack up" not in err


def test_sql_where_a_stack_ran_but_wrote_no_tape_points_at_the_tape_writers_log(tmp_path, capsys):
    StackPaths(tmp_path).logs.mkdir()
    (StackPaths(tmp_path).logs / "tape.log").write_text("duckdb.IOException: could not set lock on file\n")
    assert main(["--state-dir", str(tmp_path), "sql", "SELECT 1"]) == 2
    err = capsys.readouterr().err
    assert f"a stack ran under {tmp_path}, but its tape writer never created the tape ({tmp_path}/logs/tape.log" in err


@pytest.mark.timeout(120)
def test_sql_after_stack_up_and_down_with_no_run_answers_that_no_run_is_there(tmp_path, capsys, monkeypatch):
    for name in ("YETO_NATS_URL", "YETO_NATS_CREDS", "YETO_NATS_CA"):    # stack up sets its credential: undo it
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    assert main(["--state-dir", str(tmp_path), "stack", "up"]) == 0
    assert main(["--state-dir", str(tmp_path), "stack", "down"]) == 0
    capsys.readouterr()
    assert main(["--state-dir", str(tmp_path), "sql", "SELECT count(*) AS num_runs FROM runs", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"num_runs": 0}]


def test_tape_show_filters_by_run_and_type(state, capsys):
    assert yeto(state, "tape", "show", "r-one", "--type", "RoundMerged", "--limit", "2") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[2:-1]] == ["8", "13"]
    assert "global_version=2" in lines[3] and lines[-1] == "(2 rows)"


def test_tape_replay_prints_the_timeline_and_the_final_state(state, capsys):
    assert yeto(state, "tape", "replay", "r-one", "--until", "8") == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()[2:10]]
    assert [r[2] for r in rows][:4] == ["RunLaunched", "IslandRequested", "IslandRequested", "IslandUp"]
    assert rows[-1][:6] == ["8", "12:13:00.000", "RoundMerged", "running", "2/2", "2"]
    assert "run r-one: running" in out


def test_status_lists_runs_and_details_one(state, capsys):
    assert yeto(state, "status") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split()[:2] == ["r-one", "finalized"] and lines[3].split()[:2] == ["r-two", "running"]
    assert yeto(state, "status", "r-one") == 0
    out = capsys.readouterr().out
    assert "run r-one: finalized (max_steps)" in out and "spend so far $4.5000" in out and "versions 0:v2 1:v1" in out
    assert yeto(state, "status", "r-nope") == 2
    assert "no events of run 'r-nope'" in capsys.readouterr().err


def test_logs_print_the_tail_and_follow_appended_lines(state, capsys):
    logs = StackPaths(state).run_dir("r-one") / "logs"
    logs.mkdir(parents=True)
    (logs / "island-0.log").write_text("".join(f"line {i}\n" for i in range(100)))
    (logs / "island-1.log").write_text("other\n")
    assert yeto(state, "logs", "r-one", "--island", "0", "-n", "3") == 0
    assert capsys.readouterr().out == "line 97\nline 98\nline 99\n"
    out, stop, passes = io.StringIO(), threading.Event(), []

    def files():                        # the follower asks at the start of each pass over the files
        passes.append(len(passes))
        return log_files(state, "r-one", None)

    follower = threading.Thread(target=follow_logs, args=(files, out),
                                kwargs=dict(lines=1, follow=True, stop=stop.is_set, interval=0.02))
    follower.start()
    with open(logs / "island-1.log", "a") as f:
        f.write("half a li")
        f.flush()
        written = len(passes)           # a pass that starts after this one read the half line whole
        wait_for(lambda: len(passes) >= written + 2, 10, "a pass of the follower over the half-written line")
        f.write("ne\n")
    wait_for(lambda: "[island-1] half a line" in out.getvalue(), 10, "the completed line to be followed",
             detail=out.getvalue)
    stop.set()
    follower.join(5)
    assert out.getvalue().splitlines() == ["[island-0] line 99", "[island-1] other", "[island-1] half a line"]
    assert yeto(state, "logs", "r-two") == 2
