"""`yeto launch` with cloud islands rents the run's head, waits until it answers over TLS and hands it the run; `yeto
status / sql / down RUN` find the head through its record; secrets reach only the bundle's 0600 env file.

The head here is the real stack (`stack.up(..., head_run=...)`, TLS on 127.0.0.1) started from the bundle the CLI
made, by `LocalHeadSky`, a SkyApi behind the protocol that copies the task's file mount as the VM's state dir.
Executing the task itself in network namespaces is the rehearsal's (test_cloud_rehearsal*.py).
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from waiting import until, wait_for
from yeto.cli.main import main
from yeto.infra import stack
from yeto.infra.bus import connect
from yeto.infra.head import records as heads
from yeto.schemas.head_size import HeadTooSmall, choose_head, trainable_of
from yeto.schemas.subjects import event_subject
from yeto.services.launcher import head as head_module
from yeto.services.launcher.backends.sky_api import ManagedJob
from yeto.services.launcher.backends.sky_tasks import head_task

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "services" / "planner" / "fixtures" / "catalog"
SECRET, OTHER_SECRET = "hf_not-for-the-tape-7f3a9c", "value-of-my-key-51be02"
WORLD: dict = {"calls": [], "root": None, "port": 0, "address": "127.0.0.1", "fail": None}


class LocalHeadSky:
    """SkyApi whose head is a local head stack; islands are never rented here (jobs_launch refuses)."""

    def launch_cluster(self, task, cluster: str, *, idle_minutes_to_autodown: int) -> None:
        WORLD["calls"].append(("launch_cluster", cluster, idle_minutes_to_autodown, task))
        if WORLD["fail"]:
            raise RuntimeError(WORLD["fail"])
        if WORLD["address"] is None:
            return                         # "provisioned", but nothing will ever answer there
        ((target, source),) = task.file_mounts.items()
        vm_state = Path(WORLD["root"]) / cluster / target.replace("~/", "")
        shutil.copytree(source, vm_state)  # what the file mount ships, and nothing else
        env = {k: v for k, v in os.environ.items() if not k.startswith("YETO_NATS")}
        code = (f"from pathlib import Path; from yeto.infra import stack; stack.up(Path({str(vm_state)!r}), "
                f"port={WORLD['port']}, head_run={cluster.removeprefix('yeto-head-')!r}, hosts=['127.0.0.1'])")
        path = os.pathsep.join([str(Path(__file__).parent), str(REPO / "tests")])   # where $YETO_SKY_API is found
        subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": path},
                       check=True, timeout=180, stdout=subprocess.DEVNULL)

    def cluster_address(self, cluster: str) -> str | None:
        return WORLD["address"]

    def down_cluster(self, cluster: str) -> None:
        WORLD["calls"].append(("down_cluster", cluster))
        stack.down(Path(WORLD["root"]) / cluster / ".yeto" / "head")

    def jobs_launch(self, task, name: str) -> int:
        raise RuntimeError("this test rents no islands")

    def jobs_queue(self) -> list[ManagedJob]:
        return []

    def jobs_cancel(self, job_ids: list[int]) -> None:
        WORLD["calls"].append(("jobs_cancel", job_ids))

    def jobs_logs(self, job_id: int) -> str:
        return ""

    def check(self) -> dict[str, str | None]:
        return {"aws": None}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def material(tmp_path_factory):
    sys.path.insert(0, str(REPO / "tests" / "learner"))
    from learner_tiny import write_chat_jsonl, write_model_dir

    root = tmp_path_factory.mktemp("cloud-head")
    return write_model_dir(root / "model"), write_chat_jsonl(root / "chat.jsonl", 40)


def _world(mp: pytest.MonkeyPatch, root: Path, **changes) -> None:
    WORLD.update({"calls": [], "root": str(root), "port": _free_port(), "address": "127.0.0.1", "fail": None, **changes})
    mp.setattr(head_module, "HEAD_PORT", WORLD["port"])
    mp.setenv("YETO_SKY_API", f"{__name__}:LocalHeadSky")
    for name in ("YETO_NATS_CREDS", "YETO_NATS_CA", "YETO_NATS_URL", "YETO_HOME"):
        mp.setenv(name, "")               # the CLI sets some of these in this process: restored after the test
        mp.delenv(name)


def _launch(material, state: Path, run: str, *extra: str) -> int:
    model, data = material
    return main(["--state-dir", str(state), "launch", "--gpu", "aws:1xA100", "--model", str(model), "--data", str(data),
                 "--catalog-dir", str(CATALOG), "--seq-len", "64", "--max-steps", "3", "--run-id", run, "--yes", *extra])


@pytest.fixture(scope="module")
def launched(material, tmp_path_factory):
    """One cloud launch for the module's tests: (laptop state dir, run id, head record, the CLI's output, SkyApi calls)."""
    root, run = tmp_path_factory.mktemp("cloud-launch"), "r-cloud-head"
    with pytest.MonkeyPatch.context() as mp:
        _world(mp, root / "vms")
        mp.setenv("HF_TOKEN", SECRET)
        mp.setenv("MY_KEY", OTHER_SECRET)
        capture = root / "out.txt"
        with open(capture, "w") as out:
            mp.setattr(sys, "stdout", out)
            mp.setattr(sys, "stderr", out)
            code = _launch(material, root / "laptop", run, "--env-from-host", "MY_KEY")
        try:
            assert code == 0, capture.read_text()
            yield root / "laptop", run, heads.head_record(root / "laptop", run), capture.read_text(), WORLD["calls"]
        finally:
            stack.down(root / "vms" / f"yeto-head-{run}" / ".yeto" / "head")


def test_launch_rents_the_head_records_it_privately_and_waits_until_it_answers(launched):
    state, run, rec, out, calls = launched
    assert rec["state"] == "up" and rec["url"].startswith("tls://127.0.0.1:") and rec["cluster"] == f"yeto-head-{run}"
    ((_, cluster, idle, task),) = [c for c in calls if c[0] == "launch_cluster"]
    assert cluster == rec["cluster"] and idle == 5
    assert task.file_mounts == {"~/.yeto/head": str(heads.bundle_dir(state, run))}
    assert f"stack up --head --run-id {run}" in task.run and "--foreground" in task.run
    assert f"the head answers at {rec['url']}" in out and not [c for c in calls if c[0] == "down_cluster"]
    inside = list(heads.head_dir(state, run).rglob("*"))
    for folder in (state / "heads", heads.head_dir(state, run), *[p for p in inside if p.is_dir()]):
        assert oct(folder.stat().st_mode & 0o777) == "0o700", folder
    files = [p for p in inside if p.is_file()]
    assert {p.name for p in files} >= {"head.json", "operator.json", "service.json", "users.conf", "server.pem", "server.key",
                                       "env.json"}
    for f in files:
        assert oct(f.stat().st_mode & 0o777) == "0o600", f
    assert Path(rec["ca_file"]).is_file() and Path(rec["creds_file"]).is_file()


def test_the_run_on_the_head_carries_the_heads_url_and_secrets_stay_in_the_env_file(launched, monkeypatch):
    state, run, rec, out, _ = launched
    for name, value in heads.head_env(rec).items():
        monkeypatch.setenv(name, value)

    async def run_launched() -> dict:
        bus, seen, changed = await connect(rec["url"], name="test"), [], asyncio.Event()

        async def on_event(d) -> None:
            seen.append(json.loads(d.data))
            changed.set()
        watch = await bus.watch(event_subject(run, "RunLaunched"), on_event)
        try:
            return (await until(lambda: seen, 60, "RunLaunched on the head's bus", changed=changed))[0]
        finally:
            await watch.close()
            await bus.close()

    assert asyncio.run(run_launched())["recipe"]["bus_url"] == rec["url"]
    env_file = heads.bundle_dir(state, run) / "secrets" / "env.json"
    assert json.loads(env_file.read_text()) == {"HF_TOKEN": SECRET, "MY_KEY": OTHER_SECRET}
    tape = wait_for(lambda: _sql(state, run, "select type, payload from events"), 60, "the run's events on the head's tape",
                    detail=lambda: _sql(state, run, "select type from events"))
    password = json.loads(Path(rec["creds_file"]).read_text())["password"]
    for text in (tape, out, (heads.head_dir(state, run) / "head.json").read_text()):
        assert SECRET not in text and OTHER_SECRET not in text and password not in text


def _sql(state: Path, run: str, query: str) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):   # the head's tape writer may be starting
        code = main(["--state-dir", str(state), "sql", "--run", run, query, "--format", "json"])
    return buf.getvalue() if code == 0 and "RunLaunched" in buf.getvalue() else ""


def test_status_and_down_reach_the_head_through_its_record(launched, capsys):
    state, run, rec, _, _ = launched
    assert stack.stack_url(state) is None                          # no local stack: only the record leads there

    async def stop_seen() -> dict:
        bus, seen, changed = await connect(rec["url"], name="test"), [], asyncio.Event()

        async def on_msg(msg) -> None:
            seen.append(json.loads(msg.data))
            changed.set()
        sub = await bus.nc.subscribe("yeto.cmd.>", cb=on_msg)      # core NATS sees what JetStream stores
        await bus.nc.flush()
        try:
            assert await asyncio.to_thread(main, ["--state-dir", str(state), "down", run, "--now"]) == 0
            return (await until(lambda: [m for m in seen if m["type"] == "StopRun"], 30, "StopRun on the head",
                                changed=changed))[0]
        finally:
            await sub.unsubscribe()
            await bus.close()

    stop = asyncio.run(stop_seen())
    assert stop["run_id"] == run and stop["now"] is True
    # The run ended at once (its island was dropped: the head's URL is loopback here), so status copies it back
    assert main(["--state-dir", str(state), "status", run]) == 0
    assert f"copied run {run} back" in capsys.readouterr().out and heads.head_record(state, run)["state"] == "copied"
    assert main(["--state-dir", str(state), "status"]) == 0
    assert run in capsys.readouterr().out


def test_a_missing_env_from_host_variable_is_refused_before_anything_is_rented(material, tmp_path, monkeypatch, capsys):
    _world(monkeypatch, tmp_path / "vms")
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    assert _launch(material, tmp_path / "laptop", "r-no-var", "--env-from-host", "NOT_SET_HERE") == 2
    assert "NOT_SET_HERE" in capsys.readouterr().err
    assert WORLD["calls"] == [] and not (tmp_path / "laptop" / "heads").exists()


def test_a_loopback_nats_url_is_refused_for_cloud_islands(material, tmp_path, monkeypatch, capsys):
    _world(monkeypatch, tmp_path / "vms")
    assert main(["--nats-url", "nats://127.0.0.1:4222", "--state-dir", str(tmp_path), "launch", "--gpu", "aws:1xA100",
                 "--model", str(material[0]), "--data", str(material[1]), "--catalog-dir", str(CATALOG),
                 "--seq-len", "64"]) == 2
    assert "cannot reach 127.0.0.1" in capsys.readouterr().err and WORLD["calls"] == []


@pytest.mark.parametrize("fail, address, says", [
    ("the cloud said no: quota", "127.0.0.1", "could not be started (RuntimeError: the cloud said no: quota)"),
    (None, None, "reports no address"),
])
def test_a_head_that_fails_to_come_up_is_taken_down_again(material, tmp_path, monkeypatch, capsys, fail, address, says):
    _world(monkeypatch, tmp_path / "vms", fail=fail, address=address)
    assert _launch(material, tmp_path / "laptop", "r-no-head") == 1
    assert says in capsys.readouterr().err
    assert ("down_cluster", "yeto-head-r-no-head") in WORLD["calls"]
    assert heads.head_record(tmp_path / "laptop", "r-no-head")["state"] == "down"


def test_the_planner_path_plans_here_and_reaches_the_heads_provisioning_without_a_stack(material, tmp_path, monkeypatch,
                                                                                         capsys):
    _world(monkeypatch, tmp_path / "vms", fail="no cloud account here")
    model, data = material
    assert main(["--state-dir", str(tmp_path / "laptop"), "launch", "--model", str(model), "--data", str(data),
                 "--budget", "40", "--confirm", "--catalog-dir", str(CATALOG), "--seq-len", "64", "--run-id", "r-planned"]) == 1
    out, err = capsys.readouterr()
    assert "Fleet for" in out and "no cloud account here" in err
    assert [c[0] for c in WORLD["calls"]] == ["launch_cluster", "down_cluster"]
    assert not (tmp_path / "laptop" / "stack.json").exists()                 # no local stack was needed to plan


def test_an_unknown_head_cloud_is_refused_before_renting(material, tmp_path, monkeypatch, capsys):
    _world(monkeypatch, tmp_path / "vms")
    assert _launch(material, tmp_path / "laptop", "r-moon", "--head-cloud", "moon") == 2
    assert "--head-cloud moon" in capsys.readouterr().err and WORLD["calls"] == []
    assert heads.head_record(tmp_path / "laptop", "r-moon") is None    # refused while showing the plan: no bundle made


def test_a_head_that_never_answers_is_taken_down_after_the_deadline(tmp_path, monkeypatch):
    _world(monkeypatch, tmp_path / "vms", address=None)
    monkeypatch.setattr(LocalHeadSky, "cluster_address", lambda self, cluster: "127.0.0.1")   # nothing listens there
    heads.prepare_bundle(tmp_path, "r-silent", {})
    rec = heads.write_head(tmp_path, heads.new_record(tmp_path, "r-silent", price_per_hour=0.2, launched_at=0.0))
    for name, value in heads.head_env(rec).items():
        monkeypatch.setenv(name, value)
    lines: list[str] = []
    with pytest.raises(head_module.HeadError, match="did not answer within"):
        head_module.launch_head(tmp_path, "r-silent", memory_gb=16, wait_s=2.0, say=lines.append)
    assert any("waiting for the head's nats-server" in line for line in lines)
    assert ("down_cluster", "yeto-head-r-silent") in WORLD["calls"]


def test_a_cloud_run_copied_back_answers_status_and_sql_from_its_copy_with_no_head_up(tmp_path, monkeypatch, capsys):
    from yeto.infra.tape.store import TapeStore
    from yeto.schemas.fleet import RunLaunched

    _world(monkeypatch, tmp_path / "vms")
    launched = json.loads((REPO / "schemas" / "fixtures" / "RunLaunched.v1.json").read_text()) | {"run_id": "r-copied"}
    heads.prepare_bundle(tmp_path, "r-copied", {})
    heads.write_head(tmp_path, heads.new_record(tmp_path, "r-copied", price_per_hour=0.2, launched_at=0.0)
                     | {"url": "tls://192.0.2.1:4222", "state": "copied"})     # a head that is gone
    tape = TapeStore(heads.copied_tape(tmp_path, "r-copied"))
    tape.append([7], ["r-copied"], [RunLaunched.model_validate(launched).model_dump_json()])
    tape.close()
    assert main(["--state-dir", str(tmp_path), "sql", "--run", "r-copied", "select seq, type from events"]) == 0
    assert "RunLaunched" in capsys.readouterr().out
    heads.prepare_bundle(tmp_path, "r-gone", {})
    heads.write_head(tmp_path, heads.new_record(tmp_path, "r-gone", price_per_hour=0.2, launched_at=1.0)
                     | {"url": f"tls://127.0.0.1:{_free_port()}", "state": "up"})   # recorded up, nothing answers
    assert main(["--state-dir", str(tmp_path), "status"]) == 0                     # no local tape: the copy is listed
    out = capsys.readouterr().out
    (gone,) = [line for line in out.splitlines() if "r-gone" in line]               # one line for the silent head
    assert gone.startswith("r-gone: its head yeto-head-r-gone does not answer") and "r-copied" in out
    assert main(["--state-dir", str(tmp_path), "status", "r-copied"]) == 0
    assert "r-copied" in capsys.readouterr().out


def test_the_head_is_sized_to_hold_the_syncer_and_a_run_too_large_is_refused_with_the_numbers():
    small = choose_head(trainable_of(16.0, "lora"), num_learners=4)            # 8B LoRA: ~160M trainable
    assert small.vm.memory_gb == 16 and small.need_gb <= 16
    full = choose_head(trainable_of(16.0, "full"), num_learners=4)             # 8B full: 8G values
    assert full.need_gb <= full.vm.memory_gb and full.vm.memory_gb > 16
    assert full.need_gb > full.syncer.head / 1e9, "a margin and the rest of the head on top of the syncer"
    assert small.price(0.5) == 0.5 and full.price(0.19) == full.vm.price_per_hour, "spend counts the larger type"
    with pytest.raises(HeadTooSmall, match=r"--head-memory-gb \d+.*--syncers N"):
        choose_head(trainable_of(140.0, "full"), num_learners=8)
    assert choose_head(trainable_of(140.0, "full"), num_learners=2, memory_gb=8192).vm.memory_gb == 8192
    assert "--syncers 3" in head_task("r1", "/tmp", syncers=3).run and "--syncers" not in head_task("r1", "/tmp").run


def test_env_from_host_names_must_be_names_and_hf_token_goes_when_set():
    assert heads.host_secrets({"HF_TOKEN": "t", "A": "1", "B": "2"}, ["A"]) == {"HF_TOKEN": "t", "A": "1"}
    assert heads.host_secrets({}, []) == {}
    with pytest.raises(ValueError, match="not an environment variable name"):
        heads.host_secrets({}, ["A=B"])
    with pytest.raises(ValueError, match="--env-from-host X, Y: not set"):
        heads.host_secrets({"A": "1"}, ["A", "X", "Y"])


def test_a_local_data_file_goes_with_the_head_and_the_heads_launcher_mounts_it_on_islands(launched, monkeypatch):
    from yeto.services.launcher.backends.sky_tasks import data_mount

    state, run, rec, _, _ = launched
    shipped = heads.bundle_dir(state, run) / "data" / "chat.jsonl"          # 0600 like the rest (checked above)
    recipe = wait_for(lambda: _sql(state, run, "select type, payload->'recipe'->'train'->>'data' d from events "
                                               "where type = 'RunLaunched'"), 60, "RunLaunched on the head's tape")
    assert json.loads(recipe)[0]["d"] == "~/.yeto/head/data/chat.jsonl"      # the head's path, not this machine's
    vm_home = state.parent / "vms" / rec["cluster"]                           # LocalHeadSky's VM: the mount, copied
    assert (vm_home / ".yeto/head/data/chat.jsonl").read_bytes() == shipped.read_bytes()
    monkeypatch.setenv("HOME", str(vm_home))                                  # `~` as the head's launcher sees it
    assert data_mount("~/.yeto/head/data/chat.jsonl") == (
        {"~/.yeto/data/chat.jsonl": str(vm_home / ".yeto/head/data/chat.jsonl")}, "~/.yeto/data/chat.jsonl")
