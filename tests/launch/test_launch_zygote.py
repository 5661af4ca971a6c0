"""The local launcher's pre-imported learner (zygote): CPU ranks forked from it run the real torch learner in their
own process group, write their exit status, read as killed when killed, and anything the zygote cannot serve
(another module, another environment) is spawned as before."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from waiting import wait_for
from yeto.learners.torch.tiny import write_chat_jsonl, write_model_dir
from yeto.schemas.learner_contract import BACKENDS
from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.backends.zygote import Zygote

pytestmark = pytest.mark.timeout(240)


def launch(count: int = 1, generation: int = 0) -> IslandLaunch:
    return IslandLaunch(run_id="r1", island=0, generation=generation, num_islands=1, nats_url="nats://x",
                        spec={"cloud": "local", "gpu": "cpu", "count": count}, recipe={"train": {"model": "m"}})


def learner(recipe: str):
    """The real torch learner's command line (`--no-sync`: no NATS) with `recipe`, as the launcher's rank_argv."""
    def argv(launch, recipe_path, rank, port):
        return [sys.executable, "-m", "yeto.learners.torch", "--run-id", launch.run_id, "--learner", launch.learner,
                "--no-sync", "--recipe", recipe]
    return argv


def ended(be: LocalBackend, handle: str):
    def check():
        st = be.status("r1", 0, 0, handle)
        return None if st.running else st
    return wait_for(check, 200, "island 0 of r1 to end")


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.fixture
def tiny(tmp_path):
    recipe = {"model": str(write_model_dir(tmp_path / "model")), "data": str(write_chat_jsonl(tmp_path / "chat.jsonl")),
              "seq_len": 32, "micro_batch": 2, "max_steps": 2, "tuning": "full"}
    (tmp_path / "recipe.json").write_text(json.dumps(recipe))
    return tmp_path / "recipe.json"


@pytest.fixture
def backend(tmp_path, tiny):
    made = []

    def make(recipe: str):
        be = LocalBackend(tmp_path / "state", rank_argv=learner(recipe), zygote=True,
                          env={"OMP_NUM_THREADS": "1", "YETO_LOG_FORMAT": "json"})
        made.append(be)
        return be
    yield make
    for be in made:
        be.zygote.close()


@pytest.mark.slow
def test_forked_ranks_train_in_their_own_group_and_finish_with_status_zero(backend, tiny):
    be = backend(str(tiny))
    handle = be.start(launch(count=2))
    group = json.loads((be.gen_dir("r1", 0, 0) / "group.json").read_text())
    assert [parent(p) for p in group["pids"]] == [be.zygote.proc.pid] * 2      # forked, not spawned
    assert [os.getpgid(p) for p in group["pids"]] == [int(handle)] * 2 == [group["pids"][0]] * 2
    assert [os.getsid(p) for p in group["pids"]] == [be.zygote.proc.pid] * 2     # one group: the zygote's session
    st = ended(be, handle)
    assert (st.running, st.exit_code) == (False, 0)
    lines = [json.loads(x) for x in be.log_path("r1", 0).read_text().splitlines() if x.startswith("{")]
    starts = [x for x in lines if x["event"] == "start"]
    assert len(starts) == 2 and [x["event"] for x in lines].count("done") == 2
    assert all(x["import_s"] < 1.0 for x in starts)    # the imports were the zygote's: the ranks start past them


def test_a_forked_rank_refused_by_the_learner_writes_its_status_and_error(backend):
    be = backend('{"model": "x", "lora_rank": 4}')
    handle = be.start(launch())
    assert parent(int(handle)) == be.zygote.proc.pid
    st = ended(be, handle)
    assert st.exit_code == 2 and st.detail.startswith("rank 0 exited with status 2: ") and "lora_rank" in st.detail


def test_a_one_rank_island_leads_a_session_of_its_own_before_the_launcher_has_its_handle(backend, tmp_path, tiny):
    """Linux's autogroup scheduling shares the CPU session by session: a one-rank island is a session of its own, as
    each service of the stack is, not one of many in the zygote's. The session exists when start() returns: the
    launcher signals the group at once."""
    recipe = {**json.loads(tiny.read_text()), "max_steps": 100000}       # runs until stopped
    be = backend(json.dumps(recipe))
    handle = int(be.start(launch()))
    assert parent(handle) == be.zygote.proc.pid                           # forked
    assert os.getsid(handle) == os.getpgid(handle) == handle != os.getsid(be.zygote.proc.pid)
    be.stop("r1", 0, 0, str(handle), sig=signal.SIGKILL)
    st = ended(be, str(handle))
    assert (st.exit_code, st.detail.split(":")[0]) == (None, "killed")


def test_a_killed_forked_rank_reads_as_killed_and_is_reaped(backend, tiny):
    be = backend(str(tiny))
    handle = be.start(launch())
    be.stop("r1", 0, 0, handle, sig=signal.SIGKILL)
    st = ended(be, handle)
    assert (st.exit_code, st.detail.split(":")[0]) == (None, "killed")
    wait_for(lambda: not Path(f"/proc/{handle}").exists(), 30, "the zygote to reap its killed child")


def test_the_zygote_serves_only_the_learners_with_its_own_environment(tmp_path):
    env = {"PATH": "/bin", "HF_HUB_OFFLINE": "1"}
    z = Zygote(env, tmp_path / "zygote.log")
    try:
        torch_argv = [sys.executable, "-m", "yeto.learners.torch", "--run-id", "r1"]
        assert z.serves(torch_argv, {**env, "YETO_NATS_CREDS": "/c", "OMP_NUM_THREADS": "2"})
        assert not z.serves(torch_argv, {**env, "HF_HUB_OFFLINE": "0"})          # read by imports: spawn instead
        assert not z.serves(torch_argv, {"PATH": "/bin"})
        assert z.serves([sys.executable, "-m", "yeto.learners.diffusion"], env)
        assert z.serves([sys.executable, "-m", "yeto.learners.megatron", "--run-id", "r1"], env)
        assert not z.serves([sys.executable, "-m", "yeto.learners.mlx"], env)
        assert not z.serves([sys.executable, "-m", "yeto.learners.torch.zygote"], env)
        assert z.fork([sys.executable, "-c", "pass"], env, log=tmp_path / "l", exit_file=tmp_path / "e", pgid=0) is None
    finally:
        z.close()


def test_megatron_and_diffusion_ranks_are_forked_and_run_their_own_learner(tmp_path):
    """The zygote runs the requested learner's own `main` in the fork (its usage names it), not the torch learner's;
    a module outside its list is refused, and the launcher would spawn that rank. One zygote forks both."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    z = Zygote(env, tmp_path / "zygote.log")
    try:
        for module in ("yeto.learners.megatron", "yeto.learners.diffusion"):
            log, exit_file = tmp_path / f"{module}.log", tmp_path / f"{module}.exit"
            pid = z.fork([sys.executable, "-m", module, "--help"], env, log=log, exit_file=exit_file, pgid=0)
            assert pid is not None and parent(pid) in (z.proc.pid, 1)     # 1: it ended and was reaped already
            # the file is created, then written: wait for its line (the launcher reads a rank alive before its file)
            wait_for(lambda f=exit_file: f.exists() and f.read_text().endswith("\n") or None, 120,
                     f"the forked {module} rank to exit")
            assert exit_file.read_text() == "0\n"
            usage = " ".join(log.read_text().split())
            assert f"usage: {module} " in usage and BACKENDS[module.rsplit(".", 1)[1]].summary in usage, usage
        z.proc.stdin.write(json.dumps({"argv": [], "env": env, "log": str(tmp_path / "x.log"),
                                       "exit_file": str(tmp_path / "x.exit"), "pgid": 0, "module": "os"}) + "\n")
        z.proc.stdin.flush()
        assert "is not a learner this zygote forks" in json.loads(z.proc.stdout.readline())["error"]
    finally:
        z.close()


def test_a_rank_the_zygote_does_not_serve_is_spawned(tmp_path):
    # A rank that must still be running when the test reads its parent: its sleep is the behaviour.
    be = LocalBackend(tmp_path, rank_argv=lambda *a: [sys.executable, "-c", "import time; time.sleep(60)"], zygote=True)
    try:
        handle = be.start(launch())
        assert parent(int(handle)) == os.getpid()        # the shell wrapper, spawned by the launcher itself
        assert os.getsid(int(handle)) == int(handle) != os.getsid(0)     # a one-rank island: a session of its own
        be.stop("r1", 0, 0, handle, sig=signal.SIGKILL)
        ended(be, handle)
    finally:
        be.zygote.close()


def test_a_fork_whose_group_is_gone_ends_and_never_serves_requests(tmp_path):
    """A rank forked into a process group that no longer exists (its leader ended and was reaped meanwhile) cannot
    join it: it writes status 1 and ends, instead of returning into the zygote's loop as a second reader of its
    requests. The zygote goes on forking."""
    import subprocess
    gone = subprocess.Popen(["true"])
    gone.wait()                                     # its pid names no process group now
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    z = Zygote(env, tmp_path / "zygote.log")
    try:
        torch_argv = [sys.executable, "-m", "yeto.learners.torch", "--run-id", "r1", "--learner", "island-0",
                      "--no-sync", "--recipe", '{"model": "x", "lora_rank": 4}']
        pid = z.fork(torch_argv, env, log=tmp_path / "rank.log", exit_file=tmp_path / "rank.exit", pgid=gone.pid)
        assert pid is not None
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or None, 60, "the fork that could not join its group to end")
        assert (tmp_path / "rank.exit").read_text() == "1\n"
        again = z.fork(torch_argv, env, log=tmp_path / "rank2.log", exit_file=tmp_path / "rank2.exit", pgid=0)
        assert again is not None                    # forked by the zygote, still serving
        wait_for(lambda: (tmp_path / "rank2.exit").exists() or None, 120, "the second fork's learner to refuse its recipe")
        assert (tmp_path / "rank2.exit").read_text() == "2\n"
    finally:
        z.close()
