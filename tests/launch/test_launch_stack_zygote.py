"""The stack's pre-imported learner (infra/stack/zygote.py): started before the rest of a local stack, and by
`yeto launch` before its checks, it forks the launcher's CPU ranks through its socket; a rank whose environment
differs from the zygote's is refused by the zygote itself and spawned; a launch refused by its checks stops the
zygote it started."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from waiting import wait_for
from yeto.cli.main import main
from yeto.infra import procs
from yeto.infra.stack import zygote as stack_zygote
from yeto.learners.torch.tiny import write_chat_jsonl, write_model_dir
from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.backends.stack_zygote import StackZygote

pytestmark = pytest.mark.timeout(300)


def launch(generation: int = 0) -> IslandLaunch:
    return IslandLaunch(run_id="r1", island=0, generation=generation, num_islands=1, nats_url="nats://x",
                        spec={"cloud": "local", "gpu": "cpu", "count": 1}, recipe={"train": {"model": "m"}})


def learner(recipe: str):
    def argv(launch, recipe_path, rank, port):
        return [sys.executable, "-m", "yeto.learners.torch", "--run-id", launch.run_id, "--learner", launch.learner,
                "--no-sync", "--recipe", recipe]
    return argv


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def ended(be: LocalBackend, generation: int, handle: str):
    def check():
        st = be.status("r1", 0, generation, handle)
        return None if st.running else st
    return wait_for(check, 240, f"island 0 generation {generation} to end")


@pytest.fixture
def stack_zygote_at(tmp_path, monkeypatch):
    monkeypatch.setenv("YETO_LOG_FORMAT", "json")      # in the zygote's environment and the launcher's alike
    monkeypatch.delenv("YETO_NATS_CREDS", raising=False)
    root = tmp_path / "state"
    yield root       # started in the test: pytest's PYTEST_CURRENT_TEST differs between set-up and call
    rec = stack_zygote.running(root)
    stack_zygote.stop(root)
    wait_for(lambda: not rec or not procs.alive(rec["pid"], rec["started_at"]) or None, 30, "the stack's zygote to end")


@pytest.mark.slow
def test_a_launcher_forks_through_the_stack_zygote_and_a_differing_environment_is_spawned(stack_zygote_at, tmp_path):
    root = stack_zygote_at
    recipe = {"model": str(write_model_dir(tmp_path / "model")), "data": str(write_chat_jsonl(tmp_path / "chat.jsonl")),
              "seq_len": 32, "micro_batch": 2, "max_steps": 2, "tuning": "full"}
    rec = stack_zygote.start(root)     # after torch's import here, which sets TORCHINDUCTOR_CACHE_DIR in this process
    assert stack_zygote.start(root) == rec                 # one per stack: a second start finds it running
    first = LocalBackend(root, rank_argv=learner(json.dumps(recipe)), zygote=True, env={"OMP_NUM_THREADS": "1"})
    assert isinstance(first.zygote, StackZygote)           # attached, no zygote of its own
    handle = first.start(launch())
    assert parent(int(handle)) == rec["pid"], (root / "logs" / "learner-zygote.log").read_text()[-3000:]
    st = ended(first, 0, handle)
    assert (st.running, st.exit_code) == (False, 0)
    (start,) = [json.loads(x) for x in first.log_path("r1", 0).read_text().splitlines() if '"event": "start"' in x]
    assert start["import_s"] < 1.0
    first.zygote.close()                                    # a launcher that ends; the next one connects again

    refused = '{"model": "x", "lora_rank": 4}'
    second = LocalBackend(root, rank_argv=learner(refused), zygote=True, env={"HF_HUB_OFFLINE": "0"})
    handle = second.start(launch(generation=1))
    assert parent(int(handle)) == os.getpid()               # the shell wrapper this process spawned
    assert ended(second, 1, handle).exit_code == 2
    log = (root / "logs" / "learner-zygote.log").read_text()
    assert "not forked: the rank's environment differs from the zygote's in HF_HUB_OFFLINE" in log
    second.zygote.close()


def test_a_launch_refused_by_its_checks_stops_the_zygote_it_started(tmp_path, monkeypatch):
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    state = tmp_path / "home"
    code = main(["--state-dir", str(state), "launch", "--gpu", "local:1xcpu", "--model",
                 str(write_model_dir(tmp_path / "model")), "--data", str(tmp_path / "missing.jsonl"), "--max-steps", "2"])
    assert code != 0
    rec = json.loads((state / "zygote.json").read_text())                    # it was started before the checks
    wait_for(lambda: not procs.alive(rec["pid"], rec["started_at"]) or None, 30, "the early zygote to be stopped")
    assert not (state / "stack.json").exists()


@pytest.mark.slow
def test_two_launchers_fork_through_one_stack_zygote_without_waiting_on_each_other(stack_zygote_at, tmp_path):
    """A clustered stack runs two launcher instances on one zygote, which serves one connection at a time: each asks on
    a connection of its own request, so the second's fork does not wait for the first launcher to go (in the full run
    at 5e0324f the second's island started minutes late, and a redelivered start ran an island twice)."""
    root = stack_zygote_at
    recipe = {"model": str(write_model_dir(tmp_path / "model")), "data": str(write_chat_jsonl(tmp_path / "chat.jsonl")),
              "seq_len": 32, "micro_batch": 2, "max_steps": 2, "tuning": "full"}
    rec = stack_zygote.start(root)
    one, two = (LocalBackend(root, rank_argv=learner(json.dumps(recipe)), zygote=True, env={"OMP_NUM_THREADS": "1"})
                for _ in range(2))
    assert isinstance(one.zygote, StackZygote) and isinstance(two.zygote, StackZygote)
    first = one.start(launch())                        # `one` stays alive: a launcher instance that keeps running
    second = two.start(launch(generation=1))           # before the fix: blocked until `one` closed its connection
    assert parent(int(first)) == parent(int(second)) == rec["pid"], (root / "logs" / "learner-zygote.log").read_text()[-3000:]
    for generation, handle in ((0, first), (1, second)):
        assert ended(one, generation, handle).exit_code == 0
