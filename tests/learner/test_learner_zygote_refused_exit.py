"""A rank forked by the learners' zygote (learners/torch/zygote.py) that the bus refuses leaves from the bus thread
(learners/bus_client.py `refused`, os._exit) and still writes its status to its exit file, as a spawned rank's shell
wrapper does: the launcher reads 3 (or 4) there and does not retry an island whose credential can never work. Before,
the forked rank left no file and read as killed by a signal."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SCRIPT = r"""
import json, os, sys, threading
from yeto.learners.torch import zygote
from yeto.learners import bus_client

def main(argv):      # the learner: training anywhere while its bus thread is refused
    threading.Thread(target=bus_client.refused, args=("the bus refused this learner's credential",), daemon=True).start()
    threading.Event().wait()

zygote.entry.main = main
log, exit_file = sys.argv[1:3]
answer = zygote.fork({"argv": [], "env": dict(zygote.BOOT_ENV), "log": log, "exit_file": exit_file, "pgid": 0})
assert "pid" in answer, answer
_, status = os.waitpid(answer["pid"], 0)
print(json.dumps({"status": os.waitstatus_to_exitcode(status)}))
"""


@pytest.mark.timeout(180)
def test_a_forked_rank_refused_by_the_bus_writes_its_status_to_its_exit_file(tmp_path):
    log, exit_file = tmp_path / "rank-0.log", tmp_path / "rank-0.exit"
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(log), str(exit_file)], capture_output=True, text=True, timeout=170)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"status": 3}, out.stdout
    assert "learner stopped: the bus refused this learner's credential" in log.read_text()
    assert exit_file.read_text() == "3\n", "the launcher reads the rank's status here (services/launcher/backends/local.py)"
