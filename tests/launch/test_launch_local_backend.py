"""The local backend with real processes: one group per island generation, exit statuses, SIGKILL, chaos kill.

The learner is replaced by a tiny stand-in command behind the backend interface (its rank_argv seam); the
real learner runs in the end-to-end test.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from waiting import wait_for
from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.local import LocalBackend, cpu_threads

pytestmark = pytest.mark.timeout(60)


def stand_in(code: str):
    def argv(launch, recipe_path, rank, port):
        return [sys.executable, "-c", code, launch.learner, str(rank)]
    return argv


def launch(count: int = 2, generation: int = 0) -> IslandLaunch:
    return IslandLaunch(run_id="r1", island=0, generation=generation, num_islands=1, nats_url="nats://x",
                        spec={"cloud": "local", "gpu": "cpu", "count": count}, recipe={"train": {"model": "m"}})


# A rank that must still be running when the test acts on it: its sleep is the behaviour, it waits for nothing.
RUNS_ON = "import time; time.sleep(60)"


def ended(be: LocalBackend, handle: str, generation: int = 0):
    """The island generation's final status, once its process group is gone."""
    def check():
        st = be.status("r1", 0, generation, handle)
        return None if st.running else st
    return wait_for(check, 15, f"island 0 generation {generation} of r1 to end")


def test_ranks_run_in_one_group_log_to_the_island_log_and_finish_with_status_zero(tmp_path):
    be = LocalBackend(tmp_path, rank_argv=stand_in("import sys; sys.stdout.write(f'rank {sys.argv[2]} of {sys.argv[1]}\\n')"))
    handle = be.start(launch(count=2))
    st = ended(be, handle)
    assert (st.running, st.exit_code) == (False, 0)
    log = be.log_path("r1", 0).read_text()
    assert "=== island 0 generation 0 ===" in log and "rank 0 of island-0" in log and "rank 1 of island-0" in log
    assert (be.run_dir("r1") / "recipe.json").read_text().strip().startswith("{")


def test_a_crashing_rank_reports_its_status(tmp_path):
    be = LocalBackend(tmp_path, rank_argv=stand_in("import sys; sys.exit(3 if sys.argv[2] == '1' else 0)"))
    handle = be.start(launch(count=2))
    st = ended(be, handle)
    assert (st.exit_code, st.detail) == (3, "rank 1 exited with status 3")


def test_sigkill_leaves_no_status_and_reads_as_killed_and_start_is_idempotent(tmp_path):
    be = LocalBackend(tmp_path, rank_argv=stand_in(RUNS_ON))
    handle = be.start(launch(count=2))
    assert be.start(launch(count=2)) == handle                       # a redelivered start spawns nothing
    assert be.status("r1", 0, 0, handle).running
    from yeto.cli.main import main
    assert main(["--state-dir", str(tmp_path), "chaos", "kill", "r1", "0"]) == 0
    st = ended(be, handle)
    assert (st.exit_code, st.detail.split(":")[0]) == (None, "killed")


def test_a_new_generation_is_a_new_group_and_chaos_kill_aims_at_the_newest(tmp_path):
    be = LocalBackend(tmp_path, rank_argv=stand_in(RUNS_ON))
    first = be.start(launch(count=1, generation=0))
    second = be.start(launch(count=1, generation=1))
    assert first != second and be.current_generation("r1", 0) == 1
    be.stop("r1", 0, 0, first)
    ended(be, first, generation=0)
    assert be.status("r1", 0, 1, second).running
    be.stop("r1", 0, 1, second)
    ended(be, second, generation=1)


def test_chaos_kill_of_an_unknown_island_says_how_islands_are_numbered(tmp_path, capsys):
    from yeto.cli.main import main

    assert main(["--state-dir", str(tmp_path), "chaos", "kill", "r1", "4"]) == 2
    assert "numbered from 0" in capsys.readouterr().err


def test_a_second_rank_joins_the_group_of_a_first_that_already_ended(tmp_path):
    """The first rank (the group's leader) ends before the second is spawned: its Popen is kept until every rank is
    started, so it is not reaped meanwhile and the group still exists for the second (dropped, the next Popen reaped
    it and the second rank's setpgid failed with EPERM)."""
    import psutil

    def argv(launch, recipe_path, rank, port):
        if rank == 1:       # the leader has exited and is a zombie of this process before the second is spawned
            wait_for(lambda: any(c.status() == psutil.STATUS_ZOMBIE for c in psutil.Process().children()) or None, 15,
                     "the first rank to end")
        return [sys.executable, "-c", "import sys; sys.exit(0)"]

    be = LocalBackend(tmp_path, rank_argv=argv)
    handle = be.start(launch(count=2))
    st = ended(be, handle)
    assert st.exit_code == 0 and st.detail == "every rank finished"


def test_two_launcher_instances_given_one_start_at_once_start_one_group(tmp_path, monkeypatch):
    """A StartIsland redelivered to a second launcher instance while the first still starts it (its ranks' forks waiting
    on a zygote that still imports, in the full run at 5e0324f) starts nothing more: exactly one instance claims the
    generation, the other returns the claimant's group once recorded."""
    from yeto.services.launcher.backends import local

    claims, second_in = [], threading.Event()
    real_claim = local.claim

    def spy(path):
        claims.append(path)
        if len(claims) == 2:
            second_in.set()
        return real_claim(path)
    monkeypatch.setattr(local, "claim", spy)

    def slow_first(launch_, recipe_path, rank, port):
        second_in.wait(20)           # the first start is held here until the second has asked (or ended)
        return stand_in(RUNS_ON)(launch_, recipe_path, rank, port)
    first, second = LocalBackend(tmp_path, rank_argv=slow_first), LocalBackend(tmp_path, rank_argv=stand_in(RUNS_ON))
    handles: dict[str, str] = {}

    def start_second():
        handles["second"] = second.start(launch(count=1))
        second_in.set()
    t = threading.Thread(target=start_second)
    try:
        handles_first = threading.Thread(target=lambda: handles.__setitem__("first", first.start(launch(count=1))))
        handles_first.start()
        wait_for(lambda: claims, 10, "the first start's claim")
        t.start()
        handles_first.join(30)
        t.join(30)
        assert handles["first"] == handles["second"], handles
        assert first.log_path("r1", 0).read_text().count("=== island 0 generation 0 ===") == 1
    finally:
        for h in set(handles.values()):
            first.stop("r1", 0, 0, h)


def test_a_claim_whose_launcher_died_mid_start_is_taken_over(tmp_path):
    """A launcher killed between its claim and its group's record leaves the claim behind: the redelivered start, on
    another instance or the restarted one, takes it over and starts the generation (never waits on a dead claimant)."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    be = LocalBackend(tmp_path, rank_argv=stand_in("pass"))
    gdir = be.gen_dir("r1", 0, 0)
    gdir.mkdir(parents=True)
    (gdir / "start.claim").write_text(json.dumps({"pid": int(dead.stdout), "started_at": 1.0}))
    handle = be.start(launch(count=1))
    assert ended(be, handle).exit_code == 0
    assert json.loads((gdir / "start.claim").read_text())["pid"] == os.getpid()


def test_local_cpu_ranks_split_the_hosts_cores_and_a_users_thread_count_is_kept():
    """The test suite sets OMP_NUM_THREADS=1 for every process it starts (tests/conftest.py), so the launcher's own
    split is checked here: two islands of one rank on 8 cores get 4 threads each, more ranks than cores 1 each."""
    assert cpu_threads({}, 2, cores=8) == {"OMP_NUM_THREADS": "4"}
    assert cpu_threads({}, 1, cores=8) == {"OMP_NUM_THREADS": "8"}
    assert cpu_threads({}, 3, cores=2) == {"OMP_NUM_THREADS": "1"}
    assert cpu_threads({"OMP_NUM_THREADS": "3"}, 2, cores=8) == {}
    assert cpu_threads({}, 2) == {"OMP_NUM_THREADS": str(max(1, len(os.sched_getaffinity(0)) // 2))}
