"""The end of a cloud run, for real on this machine: a head stack (TLS, credentials) runs a tiny local run to
finalization under its supervisor (`yeto stack up --head --foreground`), `yeto pull` copies the tape and the
artifact back over TLS with the operator credential, and the supervisor stops the head once RunCopiedBack is on
the bus; without one it stops after --linger. The supervisor's decision itself is checked as a pure function."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from waiting import wait_for
from yeto.cli.head_watch import verdict
from yeto.infra import stack
from yeto.infra.bus import connect
from yeto.infra.head import records as heads
from yeto.infra.head.artifact_files import sha256_of
from yeto.infra.head.copyback import copy_back
from yeto.infra.tape.sql import query_file
from yeto.schemas.events import MessageRejected
from yeto.schemas.final import RunStopped
from yeto.schemas.subjects import event_subject

sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))
import learner_tiny

YETO = str(Path(sys.executable).parent / "yeto")
TRAIN = ("--seq-len", "64", "--sync-every", "8", "--fragments", "2", "--lr", "3e-3", "--warmup-steps", "2",
         "--max-steps", "16")
COLUMNS = "seq, ts, run_id, type, version, source, payload::VARCHAR"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("YETO_NATS_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


class Head:
    """`yeto stack up --head --foreground` in a real process: the head VM's stack and its supervisor."""

    def __init__(self, root: Path, run_id: str, linger_s: float):
        self.state, self.out = root / "head", root / "head.out"
        self.proc = subprocess.Popen([YETO, "--state-dir", str(self.state), "stack", "up", "--head", "--run-id", run_id,
                                      "--port", str(_free_port()), "--foreground", "--linger", str(linger_s)],
                                     env=_env(), stdout=open(self.out, "w"), stderr=subprocess.STDOUT)
        wait_for(lambda: "serving until" in self.text() or self.proc.poll() is not None, 60, "the head's supervisor")
        assert self.proc.poll() is None, self.text()
        self.rec = stack.read_record(stack.StackPaths(self.state))
        self.env = {"YETO_NATS_CREDS": str(self.state / "auth" / "operator.json"), "YETO_NATS_CA": self.rec["ca_file"]}

    def text(self) -> str:
        return self.out.read_text()

    def exited(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the head's supervisor still runs after {timeout:.0f}s:\n{self.text()}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        stack.down(self.state)


def laptop_record(laptop: Path, head: Head, run_id: str) -> None:
    """What `yeto launch` keeps on the laptop about a head (infra/head/records.py), pointing at this head's files."""
    heads.write_head(laptop, {"run_id": run_id, "cluster": f"yeto-head-{run_id}", "url": head.rec["url"], "state": "up",
                              "price_per_hour": 0.0, "launched_at": time.time(), **dict(zip(
                                  ("creds_file", "ca_file"), (head.env["YETO_NATS_CREDS"], head.env["YETO_NATS_CA"])))})


async def _watch_end(url: str, run_id: str, timeout: float) -> dict:
    """ArtifactWritten's payload, once RunFinalized follows it (or fail on RunFailed / RunStopped)."""
    bus = await connect(url, name="test")
    seen: dict[str, dict] = {}
    news = asyncio.Event()

    async def on_event(d) -> None:
        seen[d.subject.split(".")[3]] = json.loads(d.data)
        news.set()
    subs = [await bus.watch(event_subject(run_id, t), on_event)
            for t in ("ArtifactWritten", "RunFinalized", "RunFailed", "RunStopped")]
    try:
        async with asyncio.timeout(timeout):
            while not ({"ArtifactWritten", "RunFinalized"} <= set(seen) or {"RunFailed", "RunStopped"} & set(seen)):
                news.clear()
                await news.wait()
        assert "RunFinalized" in seen, seen
        return seen["ArtifactWritten"]
    finally:
        for s in subs:
            await s.close()
        await bus.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pull_copies_a_finished_runs_tape_and_artifact_over_tls_and_the_head_stops_after_it(tmp_path, monkeypatch):
    run_id, laptop = "r-copyback", tmp_path / "laptop"
    model = learner_tiny.write_model_dir(tmp_path / "model")
    data = learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", 120)
    started = time.monotonic()
    head = Head(tmp_path, run_id, linger_s=600)
    try:
        for k, v in head.env.items():
            monkeypatch.setenv(k, v)
        print(f"head up {time.monotonic() - started:.1f}s")
        launch = subprocess.run([YETO, "--nats-url", head.rec["url"], "launch", "--gpu", "local:1xcpu", "--model",
                                 str(model), "--data", str(data), *TRAIN, "--run-id", run_id],
                                env=_env(**head.env), capture_output=True, text=True, timeout=120)
        assert launch.returncode == 0, launch.stdout + launch.stderr
        written = asyncio.run(_watch_end(head.rec["url"], run_id, timeout=200))
        assert not written["uploaded"]                      # the artifact is on the head's disk only
        print(f"run finalized {time.monotonic() - started:.1f}s")
        laptop_record(laptop, head, run_id)

        pull = subprocess.run([YETO, "--state-dir", str(laptop), "pull", run_id], env=_env(), capture_output=True,
                              text=True, timeout=120)
        assert pull.returncode == 0, pull.stdout + pull.stderr
        print(f"pulled {time.monotonic() - started:.1f}s")
        assert heads.head_record(laptop, run_id)["state"] == "copied"

        assert head.exited(60) == 0 and "copied the run back" in head.text(), head.text()
        assert stack.status(head.state) is None                             # the head's stack is down

        # The head's tape, complete now its writer has stopped, against the copy: the same rows of the run (up to
        # the copy's last: islands may still report after it), RunCopiedBack among them once.
        mine = query_file(heads.copied_tape(laptop, run_id), f"SELECT {COLUMNS} FROM events ORDER BY seq")["rows"]
        theirs = query_file(head.state / "tape.duckdb", f"SELECT {COLUMNS} FROM events WHERE run_id = '{run_id}' "
                                                        f"AND seq <= {mine[-1][0]} ORDER BY seq")["rows"]
        assert mine == theirs, [r[:4] for r in mine if r not in theirs] + [r[:4] for r in theirs if r not in mine]
        assert {r[3] for r in mine} >= {"RunLaunched", "RunFinalized", "ArtifactWritten"}
        (copied_back,) = [json.loads(r[6]) for r in mine if r[3] == "RunCopiedBack"]

        artifact = laptop / "runs" / run_id / "artifact"
        manifest = json.loads((artifact / "manifest.json").read_text())
        assert sha256_of(artifact / "manifest.json") == written["manifest_sha256"] == copied_back["manifest_sha256"]
        assert sorted(p.relative_to(artifact).as_posix() for p in artifact.rglob("*") if p.is_file()) == sorted(written["files"])
        assert (artifact / "artifact" / "adapter_model.safetensors").is_file() and list((artifact / "resume").iterdir())
        assert all(sha256_of(artifact / name) == sha for name, sha in manifest["files"].items())
        assert copied_back["num_files"] == len(written["files"])
        # What the pull says and `yeto verify` of the pulled artifact/: the signature over both folders holds
        assert f"deploy {artifact / 'artifact'}; the resume state is in {artifact / 'resume'}" in pull.stdout, pull.stdout
        verify = subprocess.run([YETO, "--state-dir", str(laptop), "verify", str(artifact / "artifact"), "--key",
                                 written["signer_public_key"]], env=_env(), capture_output=True, text=True, timeout=60)
        assert verify.returncode == 0 and f"checked:  the output folder {artifact}," in verify.stdout, verify.stdout
        assert copied_back["tape_rows"] == len([r for r in mine if r[0] <= copied_back["last_seq"]]), copied_back

        sql = subprocess.run([YETO, "--state-dir", str(laptop), "sql", "--run", run_id, "--format", "csv",
                              "select count(*) n from events where type = 'RunFinalized'"],
                             env=_env(), capture_output=True, text=True, timeout=60)
        assert sql.returncode == 0 and sql.stdout.split() == ["n", "1"], sql.stdout + sql.stderr
    finally:
        head.close()


@pytest.mark.timeout(120)
def test_without_a_copy_back_the_head_stops_linger_seconds_after_the_run_ended(tmp_path, monkeypatch):
    run_id, linger_s = "r-linger", 3.0
    head = Head(tmp_path, run_id, linger_s=linger_s)
    try:
        for k, v in head.env.items():
            monkeypatch.setenv(k, v)

        async def scenario() -> float:
            bus = await connect(head.rec["url"], name="test")
            try:
                await bus.publish(MessageRejected(run_id=run_id, subject="yeto.frag.x", reason="a run goes on"))
                with pytest.raises(ValueError, match="has not ended yet"):   # pull refuses a run that goes on
                    await copy_back(tmp_path / "laptop", run_id, head.rec["url"])
                assert head.proc.poll() is None                                  # ... and so does the head
                await bus.publish(RunStopped(run_id=run_id, reason="yeto down --now", source="finalizer"))
                return time.monotonic()
            finally:
                await bus.close()

        ended = asyncio.run(scenario())
        assert head.exited(60) == 0
        assert time.monotonic() - ended >= linger_s - 0.5, head.text()      # not before the linger ran out
        assert f"within --linger {linger_s:g}s" in head.text() and stack.status(head.state) is None
    finally:
        head.close()


def test_the_head_is_done_only_once_the_run_ended_and_was_copied_back_or_lingered():
    assert verdict({}, 100.0, 60) == (None, None)
    assert verdict({"ArtifactWritten": 10.0}, 100.0, 60) == (None, None)      # the artifact alone: not over
    assert verdict({"RunCopiedBack": 5.0}, 100.0, 60) == (None, None)        # a copy of a run that goes on
    finalized = {"ArtifactWritten": 10.0, "RunFinalized": 20.0}
    assert verdict(finalized, 50.0, 60) == (None, 30.0)                       # waits what is left of the linger
    why, _ = verdict({**finalized, "RunCopiedBack": 55.0}, 56.0, 60)
    assert why == "the laptop copied the run back"
    why, _ = verdict(finalized, 80.0, 60)
    assert why is not None and "--linger 60s" in why
    assert verdict({"RunStopped": 10.0}, 20.0, 60) == (None, 50.0)            # stopped or failed: no artifact to wait for
    assert verdict({"RunFailed": 10.0, "RunCopiedBack": 30.0}, 31.0, 60)[0] == "the laptop copied the run back"


def _artifact(state: Path, run_id: str, files: dict[str, bytes]) -> str:
    """An artifact folder as the finalizer leaves it on a head; returns its manifest's sha256."""
    import hashlib

    folder = state / "runs" / run_id / "artifact"
    folder.mkdir(parents=True)
    for name, body in files.items():
        (folder / name).write_bytes(body)
    text = json.dumps({"files": {n: hashlib.sha256(b).hexdigest() for n, b in files.items()}}).encode()
    (folder / "manifest.json").write_bytes(text)
    (state / "stack.json").write_text("not an artifact file")
    return hashlib.sha256(text).hexdigest()


@pytest.mark.timeout(60)
async def test_the_head_serves_only_the_manifests_files_and_the_pull_checks_every_one(bus, tmp_path, run_id):
    from yeto.infra.head import artifact_files
    from yeto.schemas.subjects import CHUNK_BYTES, artifact_subject

    head, dest = tmp_path / "head", tmp_path / "laptop" / "artifact"
    big = os.urandom(2 * CHUNK_BYTES + 123)             # several chunks, the last a short one
    sha = _artifact(head, run_id, {"adapter_model.safetensors": big, "adapter_config.json": b"{}"})
    sub = await artifact_files.serve(bus, head, run_id)
    try:
        manifest = await artifact_files.fetch(bus, run_id, dest, sha)
        assert (dest / "adapter_model.safetensors").read_bytes() == big and set(manifest["files"]) == {
            "adapter_model.safetensors", "adapter_config.json"}
        assert sorted(p.name for p in dest.iterdir()) == ["adapter_config.json", "adapter_model.safetensors",
                                                          "manifest.json"]
        for name in ("../../../stack.json", "/etc/passwd", "..", "stack.json"):   # nothing outside the manifest
            reply = await bus.request(artifact_subject(run_id), json.dumps({"file": name, "offset": 0}).encode(),
                                      timeout_s=10)
            assert reply == b"", name
        with pytest.raises(ValueError, match="manifest.json from the head does not match"):
            await artifact_files.fetch(bus, run_id, tmp_path / "other", "0" * 64)   # not the run's manifest

        (head / "runs" / run_id / "artifact" / "adapter_config.json").write_bytes(b"{tampered}")
        (dest / "adapter_config.json").unlink()
        with pytest.raises(ValueError, match="adapter_config.json from the head does not match"):
            await artifact_files.fetch(bus, run_id, dest, sha)
        assert not (dest / "adapter_config.json").exists() and not list(dest.glob(".*.part"))
    finally:
        await sub.close()


@pytest.mark.timeout(60)
async def test_the_tape_copy_holds_the_runs_events_with_the_streams_sequences_and_resumes(bus, tmp_path, run_id):
    from yeto.infra.tape.copy import copy_tape

    def rejected(i: int) -> MessageRejected:
        return MessageRejected(id=f"{run_id}-{i}", run_id=run_id, subject="yeto.frag.x", reason=f"event {i}")

    seqs = [await bus.publish(rejected(i)) for i in range(3)]
    await bus.publish(MessageRejected(run_id="another-run", subject="yeto.frag.x", reason="not this run's"))
    db = tmp_path / "tape.duckdb"
    first = await copy_tape(bus, run_id, db)
    seqs += [await bus.publish(rejected(i)) for i in range(3, 5)]
    second = await copy_tape(bus, run_id, db)                       # only what came after the first copy
    assert (first.rows, first.last_seq, second.rows, second.last_seq) == (3, seqs[2], 5, seqs[4])
    rows = query_file(db, "SELECT seq, run_id, type, payload->>'reason' FROM events ORDER BY seq")["rows"]
    assert rows == [[s, run_id, "MessageRejected", f"event {i}"] for i, s in enumerate(seqs)]
    assert second.ends == {} and second.written is None            # the run has not ended


def test_only_the_operator_may_ask_for_or_serve_a_heads_artifact_files():
    from yeto.infra.bus.perms import learner_permissions, operator_permissions, service_permissions
    from yeto.schemas.subjects import artifact_subject, subject_matches

    def may(perms: dict, action: str) -> bool:
        rule = perms[action]
        return (any(subject_matches(p, artifact_subject("r1")) for p in rule["allow"])
                and not any(subject_matches(p, artifact_subject("r1")) for p in rule.get("deny", [])))

    assert may(operator_permissions(), "publish") and may(operator_permissions(), "subscribe")
    for perms in (service_permissions(), learner_permissions("r1", "island-0")):
        assert not may(perms, "publish") and not may(perms, "subscribe")


def test_pull_says_what_it_cannot_copy_and_a_copied_run_is_not_copied_twice(tmp_path, capsys, monkeypatch):
    from yeto.cli.main import main

    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    laptop = str(tmp_path)
    assert main(["--state-dir", laptop, "pull", "r-local"]) == 2
    assert "no head record" in capsys.readouterr().err
    record = {"run_id": "r-gone", "cluster": "yeto-head-r-gone", "url": "tls://203.0.113.7:4222", "state": "down",
              "ca_file": "", "creds_file": "", "price_per_hour": 0.1, "launched_at": 0.0}
    heads.write_head(tmp_path, record)
    assert main(["--state-dir", laptop, "pull", "r-gone"]) == 2
    assert "head is down: there is nothing to copy from" in capsys.readouterr().err
    heads.write_head(tmp_path, {**record, "state": "copied"})
    assert main(["--state-dir", laptop, "pull", "r-gone"]) == 0
    assert "copied back already" in capsys.readouterr().out
