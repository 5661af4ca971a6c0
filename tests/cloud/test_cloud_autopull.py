"""A cloud run comes home without `yeto pull`: at the end of `yeto launch --wait`, and on the first `yeto status RUN`
after its end, the CLI copies its tape (and an artifact on the head's disk only) back and the head's supervisor
stops; while the run goes on `yeto status RUN` copies nothing. A real head (`yeto stack up --head --foreground`,
TLS, credentials) with the laptop's record of it, as in test_cloud_copyback.py."""
from __future__ import annotations

import asyncio
import subprocess
import time

import pytest

from test_cloud_copyback import TRAIN, YETO, Head, _env, laptop_record, learner_tiny
from waiting import wait_for
from yeto.infra.bus import connect
from yeto.infra.head import records as heads
from yeto.schemas.events import MessageRejected
from yeto.schemas.final import RunStopped


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_launch_wait_copies_a_finished_cloud_run_back_and_the_head_stops(tmp_path):
    run_id, laptop = "r-autopull", tmp_path / "laptop"
    model = learner_tiny.write_model_dir(tmp_path / "model")
    data = learner_tiny.write_chat_jsonl(tmp_path / "chat.jsonl", 120)
    head = Head(tmp_path, run_id, linger_s=600)
    try:
        laptop_record(laptop, head, run_id)              # what `yeto launch` keeps once it rented the head
        started = time.monotonic()
        done = subprocess.run([YETO, "--state-dir", str(laptop), "--nats-url", head.rec["url"], "launch", "--gpu",
                               "local:1xcpu", "--model", str(model), "--data", str(data), *TRAIN, "--run-id", run_id,
                               "--wait"], env=_env(**head.env), capture_output=True, text=True, timeout=240)
        print(f"launch --wait took {time.monotonic() - started:.0f}s")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"copied run {run_id} back: its tape" in done.stdout and "its artifact" in done.stdout, done.stdout
        assert heads.head_record(laptop, run_id)["state"] == "copied" and heads.copied_tape(laptop, run_id).exists()
        output = laptop / "runs" / run_id / "artifact"
        assert (output / "manifest.json").exists()
        assert f"deploy {output / 'artifact'}; the resume state is in {output / 'resume'})" in done.stdout, done.stdout
        assert head.exited(60) == 0 and "copied the run back" in head.text(), head.text()
    finally:
        head.close()


@pytest.mark.timeout(120)
def test_status_of_a_cloud_run_copies_it_back_once_it_has_ended_and_not_before(tmp_path, monkeypatch):
    from yeto.cli.main import main

    run_id, laptop = "r-status-pull", tmp_path / "laptop"
    head = Head(tmp_path, run_id, linger_s=600)
    try:
        laptop_record(laptop, head, run_id)
        for name in ("YETO_NATS_URL", "YETO_NATS_CREDS", "YETO_NATS_CA"):
            monkeypatch.setenv(name, "")                 # `status` sets the head's: restored after the test
            monkeypatch.delenv(name)
        for k, v in head.env.items():
            monkeypatch.setenv(k, v)

        async def publish(event) -> None:
            bus = await connect(head.rec["url"], name="test")
            try:
                await bus.publish(event)
            finally:
                await bus.close()

        def status(starting: bool = False) -> str:
            out = subprocess.run([YETO, "--state-dir", str(laptop), "status", run_id], env=_env(),
                                 capture_output=True, text=True, timeout=60)
            if starting and ("no tape writer answers" in out.stderr or "no events of run" in out.stderr):
                return ""                 # the head's tape writer is starting, or has not stored the event yet: ask again
            assert out.returncode == 0, out.stdout + out.stderr
            return out.stdout

        asyncio.run(publish(MessageRejected(run_id=run_id, subject="yeto.frag.x", reason="a run goes on")))
        going = wait_for(lambda: run_id in (text := status(starting=True)) and text, 60, "the run on the head's tape")
        assert "copied" not in going and heads.head_record(laptop, run_id)["state"] == "up"
        assert head.proc.poll() is None
        asyncio.run(publish(RunStopped(run_id=run_id, reason="yeto down --now", source="finalizer")))
        ended = wait_for(lambda: "copied run" in (text := status()) and text, 60, "status to copy the ended run back")
        assert f"copied run {run_id} back: its tape" in ended and "artifact" not in ended       # stopped: none
        assert heads.head_record(laptop, run_id)["state"] == "copied"
        assert head.exited(60) == 0 and "copied the run back" in head.text(), head.text()
        assert main(["--state-dir", str(laptop), "status", run_id]) == 0       # from the copy now, nothing to copy
    finally:
        head.close()
