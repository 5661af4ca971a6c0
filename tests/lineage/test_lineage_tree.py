"""The lineage on the tape: RunResumed / RunBranched read back through the `lineage` view of a real DuckDB tape,
and `yeto lineage RUN` draws the tree around a run (ancestors down to it, its descendants) from those rows."""
from __future__ import annotations

from argparse import Namespace

from yeto.cli.lineage import LINEAGE_SQL, cmd_lineage, tree
from yeto.infra.tape.store import TapeStore
from yeto.schemas.base import to_bytes
from yeto.schemas.lineage import RunBranched, RunResumed

SHA = "ab" * 32


def edges() -> list:
    art = lambda run: f"/s/runs/{run}/artifact"  # noqa: E731
    return [RunResumed(id="e1", run_id="r-b", parent_run="r-a", parent_artifact=art("r-a"), parent_artifact_sha256=SHA,
                       start_step=100, source="cli"),
            RunBranched(id="e2", run_id="r-c", parent_run="r-a", parent_artifact=art("r-a"), parent_artifact_sha256=SHA,
                        source="cli"),
            RunResumed(id="e3", run_id="r-d", parent_run="r-b", parent_artifact=art("r-b"), parent_artifact_sha256=SHA,
                       start_step=200, source="cli")]


def tape(path) -> TapeStore:
    store, events = TapeStore(path), edges()
    store.append(list(range(1, len(events) + 1)), [e.run_id for e in events], [to_bytes(e).decode() for e in events])
    return store


def test_the_lineage_view_has_one_row_per_edge_with_its_parent(tmp_path):
    store = tape(tmp_path / "tape.duckdb")
    rows = store.con.execute("SELECT run_id, kind, parent_run, parent_artifact, parent_artifact_sha256, start_step "
                             "FROM lineage ORDER BY seq").fetchall()
    store.close()
    assert rows == [("r-b", "resume", "r-a", "/s/runs/r-a/artifact", SHA, 100),
                    ("r-c", "branch", "r-a", "/s/runs/r-a/artifact", SHA, None),
                    ("r-d", "resume", "r-b", "/s/runs/r-b/artifact", SHA, 200)]


def test_the_tree_runs_from_the_root_through_every_descendant_and_marks_the_run():
    rows = [(e.run_id, "resume" if e.type == "RunResumed" else "branch", e.parent_run, getattr(e, "start_step", None))
            for e in edges()]
    assert tree(rows, "r-b") == ["r-a",
                                 "├─ r-b  (resumed at step 100)   <- this run",
                                 "│  └─ r-d  (resumed at step 200)",
                                 "└─ r-c  (branched)"]
    assert tree(rows, "r-d")[2].endswith("<- this run") and tree(rows, "r-a")[0] == "r-a   <- this run"
    assert tree(rows, "r-lonely") == ["r-lonely   <- this run"]


def test_yeto_lineage_reads_the_view_from_the_tape_file(tmp_path, capsys):
    tape(tmp_path / "tape.duckdb").close()
    assert cmd_lineage(Namespace(state_dir=str(tmp_path), nats_url=None, run="r-c")) == 0
    assert capsys.readouterr().out.splitlines() == ["r-a", "├─ r-b  (resumed at step 100)", "│  └─ r-d  (resumed at step 200)",
                                                    "└─ r-c  (branched)   <- this run"]
    assert "FROM lineage" in LINEAGE_SQL
