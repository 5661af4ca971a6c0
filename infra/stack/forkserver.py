"""The stack's services forked from one pre-imported process instead of started as one fresh interpreter each.

Each service (and the tape writer) is `python -m MODULE ...`: started fresh, every one imported yeto, pydantic, the
NATS client, numba and DuckDB on its own (0.6-1.1 CPU s each, ~4.5 CPU s for the five, on the 2-core box where the
learners' zygote imports torch at the same moments). `stack.up` starts this module as a process of its own as it
begins (`start`), so that its imports overlap nats-server's start; once the streams exist it sends one request, every
component's command line, log file and environment (`fork_all`). The fork server forks a child for each, answers
their pids, and exits: it serves one stack start, no more. Each child is what `components.spawn` would have started:
a process of its own with its own pid (the stack record's), a session of its own, its output appended to its own log,
stdin from /dev/null, exactly the environment the request gives (the credential is a file's path there, as for a
spawned one, never a command line's word), and its module run as `__main__` with the command's arguments
(runpy, as `python -m` does). Its parent is gone when the server exits, as a spawned component's is when the CLI that
started it exits. Its /proc/PID/cmdline is the server's (`python -c ...`); its name (`ps -o comm`, top) is
`yeto-<component>`. A component that dies later is started again by `stack up` as before (components.spawn).

What is pre-imported is `PRELOAD`: not the planner's wiring, which imports OR-Tools and, through pandas, pyarrow,
whose jemalloc starts a background thread at import (a fork would copy a process with a thread); the planner's child
imports those itself. Why a fork is safe here (as for the learners' zygote, learners/torch/zygote.py): the server
only imports, starts no thread (it checks /proc/self/task against the count right after numpy's import, whose
OpenBLAS pool stops itself around a fork, and refuses to fork otherwise) and opens no connection. The collector is
off during the imports and every object frozen before the forks (gc.freeze's recipe for a process that forks without
exec); each child turns it on again and reseeds numpy's global generator (`random` is reseeded by CPython at fork).
The server answers each child's pid as it forks it; a component it gave no pid for (a refusal, an error, no answer
within `ANSWER_S`: it is killed then, and the children it answered for are kept) is spawned as before.

On unless `$YETO_FORK_SERVICES` is 0 (`ENABLE_ENV`). It was off from c09a62f until e96f6a4: the TLS heads' cloud
rehearsals failed with it on (CI at 1c48aef, 2026-12-06): a forked component serves at once, and `stack.up` wrote
stack.json only after this server's answer; a head's forked launcher took the run's first StartIsland before that (the
laptop hands a head its run as soon as nats-server answers), read no `ca_file` (that island shipped without the head's
certificate: its learner's CERTIFICATE_VERIFY_FAILED, its pushes never arrived) and found no nats-server to reload
with the island's new credential. Since 19bd60e the record is written before any component starts
(tests/infra/test_infra_fork_tls.py), and with the fork server on the cloud rehearsals that failed pass.
tests/infra/test_infra_head_cluster.py had counted on no service being up yet (services that are up store a
MessageRejected for each of its `{}` probes, between the sequences it wanted contiguous); it now checks that every
sequence holds a probe or such an event.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

# Not `-m` this module: its package imports it first (runpy warns of a module run twice); the collector off first.
ENTRY = "import gc; gc.disable(); import sys; from yeto.infra.stack.forkserver import serve; sys.exit(serve())"
PRELOAD = ("yeto.infra.runner.main", "yeto.services.launcher.wiring", "yeto.services.syncer.wiring",
           "yeto.services.finalizer.wiring", "yeto.infra.tape.writer",
           # every codec's module (the registry imports each at its codec's first use: in the syncer, once forked)
           *(f"yeto.schemas.codecs.{m}" for m in ("f32", "bf16", "q4", "sparse", "feedback")))
ENABLE_ENV = "YETO_FORK_SERVICES"
ANSWER_S = 120.0     # the imports take ~1 CPU s; under a load of 20 on 2 cores, much longer


def start(log: Path) -> subprocess.Popen | None:
    """The fork server, importing: stdin takes the one request, stdout gives the answer; its own output to `log`.
    None where it is turned off ($YETO_FORK_SERVICES=0), cannot start or cannot count its threads (no /proc:
    macOS), and then every component is spawned."""
    if os.environ.get(ENABLE_ENV) == "0" or not Path("/proc/self/task").is_dir():
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(log, "ab") as out:
            return subprocess.Popen([sys.executable, "-c", ENTRY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=out, start_new_session=True)
    except OSError:
        return None


def forkable(cmd: list[str]) -> bool:
    """`python -m MODULE ...` with this interpreter: what a fork of the server can run as its `__main__`."""
    return len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-m"


def fork_all(server: subprocess.Popen | None, cmds: dict[str, list[str]], logs: Path,
             env: dict[str, str]) -> dict[str, tuple[int, float | None]]:
    """Start every component in `cmds` (its log `logs/<name>.log`, the environment os.environ with `env` over it):
    forked by `server` where it can, else spawned (components.spawn); each one's pid and start time. The server ends
    here in any case."""
    from yeto.infra import procs
    from yeto.infra.stack.components import spawn

    started: dict[str, tuple[int, float | None]] = {}
    if server is not None:
        request = {"env": {**os.environ, **env}, "components": [
            {"name": n, "cmd": c, "log": str(logs / f"{n}.log")} for n, c in cmds.items() if forkable(c)]}
        logs.mkdir(parents=True, exist_ok=True)
        try:
            out, _ = server.communicate(json.dumps(request).encode() + b"\n", timeout=ANSWER_S)
        except subprocess.TimeoutExpired:
            server.kill()               # what it forked so far has its line; the rest is spawned below
            out, _ = server.communicate()
        except OSError:
            out = b""
        finally:
            stop(server)
        for pid, name in forked(out):
            if name in cmds:
                started[name] = (pid, procs.started_at(pid))
    for name, cmd in cmds.items():
        if name not in started:
            started[name] = spawn(cmd, logs / f"{name}.log", env=env)
    return {name: started[name] for name in cmds}


def forked(out: bytes) -> list[tuple[int, str]]:
    """The server's answer: a line `{"name": ..., "pid": N}` written as each child was forked (a line is written whole:
    a pipe takes a write under PIPE_BUF at once)."""
    found = []
    for line in out.decode(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            one = json.loads(line)
            if isinstance(one, dict) and isinstance(one.get("pid"), int) and isinstance(one.get("name"), str):
                found.append((one["pid"], one["name"]))
    return found


def stop(server: subprocess.Popen | None) -> None:
    """The server gone: it has answered and exits by itself, or it is killed (a start that failed before asking)."""
    if server is None or server.poll() is not None:
        return
    try:
        if server.stdin and not server.stdin.closed:
            server.stdin.close()       # EOF: it exits without forking
        server.wait(timeout=2)
    except (OSError, subprocess.TimeoutExpired):
        server.kill()
        server.wait()


# ---- the server process ----

def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def child(request: dict) -> NoReturn:
    """The forked component: its session, its output, its environment, then its module as `__main__`. It never
    returns into the server's loop: its end (a return, sys.exit, an uncaught error) unwinds to the interpreter's own
    exit, as a spawned component's does (its status, the traceback, atexit handlers, non-daemon threads joined)."""
    import runpy

    gc.enable()
    os.setsid()                     # a session of its own, as components.spawn's start_new_session
    null, out = os.open(os.devnull, os.O_RDONLY), os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for fd, target in ((null, 0), (out, 1), (out, 2)):   # over the server's request and answer pipes
        os.dup2(fd, target)
    os.close(null)
    os.close(out)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    cmd = request["cmd"]
    with contextlib.suppress(OSError):          # `ps -o comm`, top: its name, not the server's `python`
        Path("/proc/self/comm").write_text(f"yeto-{request['name']}"[:15])
    sys.argv = [cmd[0], *cmd[3:]]
    runpy.run_module(cmd[2], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def serve() -> int:
    """Import PRELOAD, read the one request, fork each component and answer its pid on stdout as it is forked, exit."""
    import importlib

    gc.disable()                    # during the imports and the forks (the module docstring); ENTRY did already
    if sys.path and sys.path[0] == "":
        sys.path[0] = os.getcwd()   # as `python -m` puts it (ENTRY is `-c`)
    import numpy  # noqa: F401
    allowed = threads()
    for name in PRELOAD:
        importlib.import_module(name)
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return 0                    # the start failed before asking: nothing to fork
    request = json.loads(line)
    if threads() > allowed:
        print(f"forkserver: {threads()} threads after the imports (allowed {allowed}): not forking", file=sys.stderr)
        return 0
    os.environ.clear()
    os.environ.update(request["env"])   # before the forks: each child's, as components.spawn gives it
    gc.freeze()
    sys.stderr.flush()
    for req in request["components"]:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            child(req)
        sys.stdout.write(json.dumps({"name": req["name"], "pid": pid}) + "\n")   # at once: see fork_all's timeout
        sys.stdout.flush()
    return 0
