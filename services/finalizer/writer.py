"""The artifact writer: a process of the finalizer's own that imports the writer's libraries and writes the artifacts.

Why a process. The artifact's libraries (torch, transformers, peft, ...) cost ~3.2 CPU s to import (warm.py). Imported
in the finalizer while a run trains, they competed with the learners beside it on a local stack; imported there at the
lowest autogroup weight (Linux shares the CPU between sessions first), they starved the finalizer's own event loop,
and with it the budget tick: under CPU load the cut came tens of seconds late (--max-spend 0.40 ended at $0.66,
2026-12-06). The imports and the write now run in this process, a session of its own: while it imports, the
finalizer gives its session the lowest weight (nice 19 in /proc/PID/autogroup), so it takes only the cycles the others
leave, and the finalizer's loop keeps its full weight. When a write is asked for, the finalizer gives it the normal
weight first (the user waits on it). The writer reads the final state from the bus itself, so the finalizer never
holds the model's values.

Protocol: one JSON object a line. On stdin `{"op": "import", "kind": "lm"}` or `{"op": "build", "cmd": <BuildArtifact>}`;
on stdout, in order, `{"cpu_s": ...}`, `{"event": <ArtifactWritten>}` or `{"error": "...", "retry_s": null | s}`.
Its log goes to stderr (the finalizer's log). It exits at the end of its stdin, or when the finalizer dies.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from yeto.schemas import parse, to_bytes
from yeto.schemas.base import Message
from yeto.schemas.final import BuildArtifact

log = logging.getLogger(__name__)

MODULES = {"lm": ("torch", "safetensors.numpy", "transformers", "peft", "huggingface_hub"),
           "diffusion": ("torch", "safetensors.torch", "transformers", "peft", "huggingface_hub", "diffusers")}
"""What the artifact writer (artifact.py, diffusion_artifact.py, card.py) imports, by the kind of run."""


LOWEST, NORMAL = 19, 0
STOP_S = 5.0            # how long a writer asked to stop may take before it is killed


def set_group_nice(pid: int, nice: int) -> None:
    """Set the autogroup (session) weight of process `pid`, where there is one (autogroup on, Linux)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


def group_nice(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split("nice")[-1])
    except (OSError, ValueError):
        return None


class WriterError(RuntimeError):
    """The writer failed a request (its reason) or exited (its exit code). `retry_s`: a write that may succeed
    later, so long from now (the final state not in the streams yet)."""

    def __init__(self, reason: str, retry_s: float | None = None):
        super().__init__(reason)
        self.retry_s = retry_s


class Writer:
    """The finalizer's handle on its writer process: started on first use, again if it died; one request at a time
    in order (a write asked for while an import runs waits for it: it needs those libraries)."""

    def __init__(self, nats_url: str | None, state_dir: Path):
        self.nats_url, self.state_dir = nats_url, Path(state_dir)
        self.proc: asyncio.subprocess.Process | None = None
        self.pending: collections.deque[asyncio.Future[dict[str, Any]]] = collections.deque()
        self.writes = 0             # writes asked for and not answered: the writer keeps the normal weight
        self.reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None or self.proc.returncode is not None else self.proc.pid

    async def _started(self) -> asyncio.subprocess.Process:
        if self.pid is not None:
            assert self.proc is not None
            return self.proc
        if not self.nats_url:
            raise WriterError("the finalizer has no NATS URL to give its artifact writer (--nats-url)")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "yeto.services.finalizer.writer", "--nats-url", self.nats_url,
            "--state-dir", str(self.state_dir), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            start_new_session=True, limit=1 << 24)
        set_group_nice(self.proc.pid, LOWEST if self.writes == 0 else NORMAL)
        self.reader = asyncio.create_task(self._read(self.proc))
        log.info("artifact writer started (pid %d)", self.proc.pid)
        return self.proc

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            if self.pending:
                future = self.pending.popleft()
                try:
                    reply = json.loads(line)
                except ValueError:
                    reply = {"error": f"the artifact writer answered something that is not JSON: {line[:200]!r}"}
                if not future.done():
                    future.set_result(reply)
        code = await proc.wait()
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_exception(WriterError(f"the artifact writer exited with code {code} before it answered "
                                                 "(its log is in the finalizer's)"))

    async def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        proc = await self._started()
        assert proc.stdin is not None
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending.append(future)
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        with contextlib.suppress(ConnectionError):      # it died: the reader fails the future with its exit code
            await proc.stdin.drain()
        return await future

    async def warm(self, kind: str) -> float:
        """Import `kind`'s libraries in the writer at the lowest weight; the CPU seconds it took."""
        if self.writes == 0:
            set_group_nice((await self._started()).pid, LOWEST)
        reply = await self._ask({"op": "import", "kind": kind})
        if "error" in reply:
            raise WriterError(reply["error"])
        return float(reply["cpu_s"])

    async def write(self, cmd: BuildArtifact) -> Message:
        """Build and deliver the artifact `cmd` asks for; its ArtifactWritten. A write that may succeed later (the
        final state not in the streams yet) raises WriterError with `retry_s` set."""
        self.writes += 1
        try:
            set_group_nice((await self._started()).pid, NORMAL)     # an import under way finishes at this weight too
            reply = await self._ask({"op": "build", "cmd": json.loads(to_bytes(cmd))})
        finally:
            self.writes -= 1
        if "error" in reply:
            raise WriterError(reply["error"], reply.get("retry_s"))
        return parse(json.dumps(reply["event"]))

    async def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        set_group_nice(proc.pid, NORMAL)        # let it see the end of its input now
        try:
            await asyncio.wait_for(proc.wait(), STOP_S)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        if self.reader is not None:
            await self.reader


# --- the writer process -------------------------------------------------------------------------------------------

def keep_bitsandbytes_out() -> None:
    """The artifact writer never quantizes: keep bitsandbytes out of it. peft (the adapter's config) and diffusers
    (the samples' LoRA) import it whenever it is installed, and with it torch's inductor: ~1 CPU s of the first
    artifact a process writes (`from peft import LoraConfig` 4.1 against 3.1 CPU s, 2026-12-06). A None in
    sys.modules reads as "not installed" to both, as learners/torch/quant.py's keep_out_unless does for a learner."""
    if "bitsandbytes" not in sys.modules:
        sys.modules["bitsandbytes"] = None   # type: ignore[assignment]


def die_with_parent() -> None:
    """SIGTERM this process when the finalizer that started it dies (Linux); elsewhere the end of stdin does it."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)      # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(0)


def import_all(names: tuple[str, ...]) -> float:
    """Import `names` (in the writer process); the CPU seconds it took. A library that is not installed is said in
    the log; the write imports it again and says what is missing there."""
    started = time.process_time()
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - the write imports it again and says what is missing there
            log.warning("warming the artifact's libraries: %s not imported (%s)", name, e)
    return time.process_time() - started


async def build(bus, state_dir: Path, cmd: BuildArtifact) -> Message:
    """Read the run's final state from the keyframe stream, write the artifact, deliver it."""
    from yeto.infra import signing
    from yeto.infra.globals_reader import read_final_state
    from yeto.infra.run_paths import run_path
    from yeto.schemas.final import ArtifactWritten
    from yeto.schemas.launch_recipe import LaunchRecipe
    from yeto.services.finalizer.artifact import write_artifact
    from yeto.services.finalizer.logic import SOURCE
    from yeto.services.finalizer.output import deliver

    state = await read_final_state(bus, cmd.run_id)
    out = run_path(state_dir, cmd.run_id, "artifact")
    key = signing.stack_key(state_dir)     # the stack's own: `yeto verify` names who signed
    summary = {"fleet": cmd.fleet, "rounds_merged": cmd.rounds_merged, "learner_steps": cmd.learner_steps,
               "learner_losses": cmd.learner_losses, "learner_eval_losses": cmd.learner_eval_losses}
    kind, files, manifest_sha = write_artifact(
        state, recipe=cmd.recipe, out=out, run_id=cmd.run_id, versions=cmd.versions, acked=cmd.acked,
        snapshot_dir=run_path(state_dir, cmd.run_id, area="syncer"), run=summary, key=key)
    where, uploaded = deliver(out, LaunchRecipe.upcast(cmd.recipe).output)
    return cmd.caused(ArtifactWritten, output=where, local_path=str(out), artifact_kind=kind, files=files,
                      manifest_sha256=manifest_sha, uploaded=uploaded, signer_public_key=signing.public_hex(key),
                      source=SOURCE)


async def serve(nats_url: str, state_dir: Path, requests, replies) -> None:
    from yeto.infra.bus import connect
    from yeto.infra.globals_reader import StateNotReady

    bus = None
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, requests.readline):
            request = json.loads(line)
            if request["op"] == "import":
                reply: dict[str, Any] = {"cpu_s": import_all(MODULES[request["kind"]])}
            else:
                try:
                    bus = bus or await connect(nats_url, name=f"finalizer-writer-{os.getpid()}")
                    cmd = parse(json.dumps(request["cmd"]))
                    assert isinstance(cmd, BuildArtifact), cmd.type
                    reply = {"event": json.loads(to_bytes(await build(bus, state_dir, cmd)))}
                except StateNotReady as e:
                    reply = {"error": f"the final state is not in the streams yet: {e}", "retry_s": 1.0}
                except Exception as e:  # said to the finalizer, which logs it and retries the command
                    log.exception("writing the artifact failed")
                    reply = {"error": f"{type(e).__name__}: {e}", "retry_s": None}
            replies.write(json.dumps(reply) + "\n")
            replies.flush()
    finally:
        if bus is not None:
            await bus.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m yeto.services.finalizer.writer",
                                     description="The finalizer's artifact writer (started by the finalizer).")
    parser.add_argument("--nats-url", required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args(argv)
    die_with_parent()
    replies = os.fdopen(os.dup(1), "w")     # the protocol's own: whatever a library prints goes to the log
    os.dup2(2, 1)
    keep_bitsandbytes_out()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s finalizer-writer %(levelname)s %(message)s")
    started = time.monotonic()
    asyncio.run(serve(args.nats_url, Path(args.state_dir), sys.stdin, replies))
    log.info("artifact writer done after %.0f s", time.monotonic() - started)


if __name__ == "__main__":
    main()
