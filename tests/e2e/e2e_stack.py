"""What the end-to-end tests share: `yeto` in real subprocesses against a real local stack, the tape polled
through the same path `yeto sql` takes, and real SIGKILLs of recorded pids (checks of a run: e2e_checks.py)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

from waiting import wait_for
from yeto.infra import stack

YETO = str(Path(sys.executable).parent / "yeto")
# Small and fast to sync: two fragments, a fragment pushed every 4 steps, a learning rate the counting task
# answers quickly. Tiny steps take ~30 ms, so step counts are in the hundreds: the learners' start-up jitter
# (seconds) must not be the whole run.
TRAIN_FLAGS = ("--seq-len", "128", "--sync-every", "8", "--fragments", "2", "--lr", "3e-3", "--warmup-steps", "2")


class Stack:
    """One YETO_HOME: launches, tape queries, and failure injection on the processes its stack.json records."""

    def __init__(self, home: Path, model: Path, data: Path):
        self.home, self.model, self.data = Path(home), Path(model), Path(data)
        self.env = {**os.environ, "YETO_HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        self.runs: dict[str, tuple[subprocess.Popen, Path]] = {}

    # -- the CLI ----------------------------------------------------------------------------------------
    def yeto(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([YETO, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def launch(self, run_id: str, *flags: str, islands: str = "local:1xcpu,local:1xcpu",
               train_flags: tuple[str, ...] = TRAIN_FLAGS) -> subprocess.Popen:
        """`yeto launch ... --wait` in the background; its output goes to <home>/<run_id>.out."""
        out = self.home.parent / f"{run_id}.out"
        argv = [YETO, "launch", "--gpu", islands, "--model", str(self.model), "--data", str(self.data),
                *train_flags, *flags, "--run-id", run_id, "--wait"]
        proc = subprocess.Popen(argv, env=self.env, stdout=open(out, "w"), stderr=subprocess.STDOUT)
        self.runs[run_id] = (proc, out)
        return proc

    def finish(self, run_id: str, timeout: float) -> str:
        """Wait for `yeto launch --wait` to exit 0; returns what it printed."""
        proc, out = self.runs[run_id]
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError(f"{run_id} not finalized within {timeout:.0f}s:\n{self.story(run_id)}") from None
        text = out.read_text()
        assert code == 0, f"yeto launch --wait exited {code}:\n{text}\n{self.story(run_id)}"
        return text

    # -- the tape ---------------------------------------------------------------------------------------
    def sql(self, query: str) -> list[dict]:
        """Rows as dicts: asked of the running tape writer, or read from the file when the stack is down."""
        from yeto.cli.sql import tape_query

        result = tape_query(Namespace(state_dir=str(self.home), nats_url=None), query)
        return [dict(zip(result["columns"], row)) for row in result["rows"]]

    def events(self, run_id: str, *types: str, after_seq: int = 0) -> list[dict]:
        """The run's events of these types after `after_seq`, payload parsed, in stream order."""
        kinds = ",".join(f"'{t}'" for t in types)
        rows = self.sql(f"select seq, ts, type, payload from events where run_id = '{run_id}' and type in ({kinds}) "
                        f"and seq > {after_seq} order by seq")
        return [{**json.loads(r["payload"]), "seq": r["seq"], "ts": r["ts"]} for r in rows]

    def until(self, run_id: str, what: str, check, *, timeout: float = 120):
        """The first truthy `check()`, a reading of the tape; a tape that does not answer (its writer restarting,
        the server away) reads as not yet. Fails after `timeout` s with the run's story."""
        def attempt():
            launch = self.runs.get(run_id, (None, None))[0]
            if launch is not None and launch.poll() not in (None, 0):     # `yeto launch` failed: nothing will come
                raise AssertionError(f"yeto launch exited {launch.returncode} while waiting for {what}:\n{self.story(run_id)}")
            try:
                return check()
            except ValueError:
                return None
        return wait_for(attempt, timeout, what, interval=0.5, detail=lambda: self.story(run_id))

    def wait_for(self, run_id: str, what: str, found, *types: str, timeout: float = 120, after_seq: int = 0) -> list[dict]:
        """Wait until `found(events)` holds for the run's events of `types` on the tape; returns those events."""
        def check():
            evs = self.events(run_id, *types, after_seq=after_seq)
            return evs if found(evs) else None
        return self.until(run_id, what, check, timeout=timeout)

    def stream_events(self, run_id: str, type_: str) -> list[dict]:
        """The run's events of one type as the event stream holds them (not the tape): with the tape, it tells
        whether an event missing there was never stored or stored and not written (the stack must be up)."""
        import asyncio

        from yeto.infra.bus import connect
        from yeto.schemas.subjects import event_subject

        async def read() -> list[dict]:
            bus = await connect(stack.read_record(stack.StackPaths(self.home))["url"], name="test-stream-read")
            try:
                consumer = await bus.consumer([event_subject(run_id, type_)], ack=False)
                out: list[dict] = []
                while True:
                    batch = await consumer.fetch(256, 2.0)
                    out += [{**json.loads(d.data), "stream_seq": d.seq} for d in batch]
                    if not batch or batch[-1].num_pending == 0:
                        await consumer.close()
                        return out
            finally:
                await bus.close()
        return asyncio.run(read())

    def story(self, run_id: str) -> str:
        """The launch output and the run's last events, for failure messages."""
        text = self.runs[run_id][1].read_text()[-3000:] if run_id in self.runs else ""
        try:
            rows = self.sql(f"select seq, type, source, left(payload::varchar, 160) p from events "
                            f"where run_id = '{run_id}' and type != 'LearnerProgress' order by seq desc limit 30")
            text += "\n" + "\n".join(f"{r['seq']} {r['type']} {r['source']} {r['p']}" for r in reversed(rows))
        except Exception as e:  # noqa: BLE001 - a failure message must not fail
            text += f"\n(tape not readable: {e})"
        return text

    # -- failure injection ------------------------------------------------------------------------------
    def pid(self, component: str) -> int:
        return stack.read_record(stack.StackPaths(self.home))["pids"][component]

    def kill9(self, component: str) -> int:
        """SIGKILL one process of the stack (as recorded in stack.json); returns once it is gone."""
        pid = self.pid(component)
        assert stack.alive(pid), f"{component} (pid {pid}) was not running before the kill; see {self.home}/logs"
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not stack.alive(pid), 10, f"{component} (pid {pid}) to be gone after SIGKILL")
        return pid

    def server_port_closed(self) -> None:
        """Returns once nothing listens on the stack's nats-server address (a killed server's port is free)."""
        host, port = stack.read_record(stack.StackPaths(self.home))["url"].rsplit("//", 1)[1].rsplit(":", 1)

        def refused() -> bool:
            try:
                socket.create_connection((host, int(port)), timeout=0.2).close()
            except OSError:
                return True
            return False
        wait_for(refused, 10, f"nats-server's port {host}:{port} to close")

    def island_ended(self, run_id: str, island: int) -> int:
        """Waits until the processes of the island's newest generation are gone, as the local launcher reads
        them (its backend's status); returns that generation."""
        from yeto.services.launcher.backends.local import LocalBackend

        backend = LocalBackend(self.home)
        gen = backend.current_generation(run_id, island)
        wait_for(lambda: not backend.status(run_id, island, gen, "").running, 30,
                 f"island {island} generation {gen} of {run_id} to be gone")
        return gen

    def up(self) -> dict:
        """What an operator runs after a crash: `stack.up` restarts whatever died."""
        return stack.up(self.home)

    def stop_launches(self) -> None:
        """Kill this object's `yeto launch --wait` processes still waiting (a setup that failed half way)."""
        for proc, _ in self.runs.values():
            if proc.poll() is None:
                proc.kill()

    def down(self) -> None:
        self.stop_launches()
        stack.down(self.home)
