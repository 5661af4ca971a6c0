"""Every result JSON a benchmark writes says where it came from: the commit (and a dirty tree), the command, the
machine (benchmarks/lib_provenance.py)."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NOT_RESULTS = {"lib_wan_arms.py": "writes the recipe files its learners read",
               "lib_wan_torchft.py": "writes the torchft arm's recipe; its child prints steps to the parent",
               "data.py": "writes the JSONL corpora benchmarks train on", "lib_task.py": "writes a synthetic corpus",
               "json_array_memory.py": "writes the input file it measures", "fsdp.py": "its child hands the parent "
               "its numbers in a temporary file; the parent prints them"}
WRITES_JSON = re.compile(r"write_text\(json\.dumps\(|json\.dump\(")


def _git(cwd: Path, *argv: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *argv], capture_output=True, text=True, check=True).stdout.strip()


def test_every_benchmark_that_writes_a_result_json_records_its_provenance():
    missing = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        name = path.name
        if name in NOT_RESULTS:
            continue
        text = path.read_text()
        if WRITES_JSON.search(text) and "provenance(" not in text:
            missing.append(name)
    assert not missing, f"these benchmarks write JSON without lib_provenance.provenance(): {missing}"


def test_the_commit_is_the_checkouts_and_a_changed_tracked_file_makes_it_dirty(tmp_path):
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "lib_provenance.py", repo / "benchmarks" / "lib_provenance.py")
    for argv in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"]):
        _git(repo, *argv)
    probe = ("import json, sys; sys.path.insert(0, 'benchmarks'); import lib_provenance; "
             "print(json.dumps(lib_provenance.provenance()))")

    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", probe, "--flag", "x"], cwd=repo, capture_output=True, text=True,
                             timeout=60, check=True)
        return json.loads(out.stdout)

    clean = run()
    assert clean["commit"] == _git(repo, "rev-parse", "HEAD") and clean["dirty"] is False
    assert clean["argv"] == [sys.executable, "-c", "--flag", "x"]
    (repo / "untracked.txt").write_text("not part of the tree\n")
    assert run()["dirty"] is False                      # untracked files do not change what ran
    (repo / "benchmarks" / "lib_provenance.py").write_text("# edited\n" + (ROOT / "benchmarks/lib_provenance.py").read_text())
    assert run()["dirty"] is True


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_benchmark_result_json_carries_the_trees_commit_the_command_and_the_machine(tmp_path):
    out_json = tmp_path / "out.json"
    head_before = _git(ROOT, "rev-parse", "HEAD")       # others may commit in this tree while it runs
    argv = [str(ROOT / "benchmarks/compare_diloco.py"), "--settings", "direct", "--seeds", "0", "--layers", "1",
            "--hidden", "16", "--steps", "2", "--micro-batch", "1", "--seq-len", "16", "--heldout-blocks", "1",
            "--workdir", str(tmp_path / "work"), "--out", str(out_json)]
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out_json.read_text())["provenance"]
    assert got["commit"] in {head_before, _git(ROOT, "rev-parse", "HEAD")}
    assert got["dirty"] == bool(_git(ROOT, "status", "--porcelain", "--untracked-files=no"))
    assert got["argv"] == [sys.executable, *argv]
    machine = got["machine"]
    import torch
    assert machine["hostname"] == socket.gethostname() and machine["cpu_count"] == os.cpu_count()
    assert machine["torch"] == torch.__version__ and machine["ram_bytes"] > 0 and machine["cpu_model"]
    assert isinstance(machine["gpus"], list)
    if torch.cuda.is_available():
        assert machine["gpus"] == [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
