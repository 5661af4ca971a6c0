"""A pre-imported torch learner (a zygote): the local launcher forks each CPU island's ranks from it.

`python -m yeto.learners.torch.zygote` imports what every learner imports (torch, transformers, numba, the
learner shell), meanwhile fills numba's on-disk cache with the codec kernels in a child process
(learners/kernels_warm.py; not waited for: a rank's own warm-up waits for its end), then reads requests from stdin, one
JSON object a line:

    {"argv": [learner arguments], "env": {...}, "log": path, "exit_file": path, "pgid": 0 or the island's group,
     "module": the learner's module (MODULES; yeto.learners.torch when absent), "session": true or absent}

and answers each with `{"pid": N}` (or `{"error": why}`) on stdout. The forked child joins the process group `pgid`
(0: a group of its own), or with `session` (a one-rank island) leads a session of its own, and so a group of its own,
before the answer goes out: with the kernel's autogroup scheduling (Linux's default, see `warm_child`) the CPU is shared
session by session, and one-rank islands left in the zygote's session weighed together as much as one busy service of
the stack (each its own session); a multi-rank island's ranks keep one group, in the zygote's session (a process cannot
join a group of another session). The child writes its output to `log`, runs the learner with `env` as its environment
and writes its exit status to `exit_file` (as the spawned rank's shell wrapper does; a rank killed by a signal leaves
none).
The Megatron-Core and diffusion learners are forked from here too: their processes import torch, transformers and
peft as the torch learner's do (~4.0 of a Megatron rank's ~5.7 CPU s of imports, idle box, 2026-12-06) and their own modules
(Megatron-Core, diffusers) in the child, after the fork.
The zygote reaps its children and ends when its stdin closes (the launcher is gone); the children run on.

Why a fork is safe here: the zygote only imports. It starts no thread (no torch op has run, so neither OpenMP's
nor torch's pools exist; numba's pool starts at the first parallel kernel) and touches no device. The one pool
an import starts is numpy's OpenBLAS (its cores less one), which OpenBLAS itself stops before a fork and restarts
after (its pthread_atfork handler). The zygote refuses to fork while /proc/self/task shows any thread beyond those
present right after numpy's import, and the launcher sends it CPU islands only. State that
imports fix and a child must not share is reset in the child: the thread count (OMP_NUM_THREADS, read by OpenMP
when torch loaded, is applied with torch.set_num_threads) and numpy's global generator (reseeded; `random` is
reseeded by CPython at fork). Every other variable the imports could have read must equal the zygote's own: the
launcher checks that before asking (services/launcher/backends/zygote.py), and the zygote checks it again against the
environment it started with (a request whose environment differs is answered with an error: the rank is spawned).

`--socket-fd N`: the stack's zygote (infra/stack/zygote.py), started before nats-server and the services (and by
`yeto launch` before its checks) so that its imports overlap theirs. It accepts on the listening Unix socket N that
the stack bound before starting it: a launcher connects at once, and its first request waits in the socket until the
zygote is ready. Each connection is one launcher's, answered one line a request as above; the zygote ends when the
stack stops it (a signal), not when a launcher goes. The socket is the file's owner's alone (its folder is 0700).

What the zygote does once so that no rank does it after its fork (each a rank's cost measured in a forked rank's
import log, `PYTHONPROFILEIMPORTTIME=1` on the launch, 2026-12-05): numba's CPU target made ready (its typing and
lowering registries, pycparser's lexer among them: ~0.4-0.6 s a rank, and as much again in the warm-up child), the
data pipeline's and the tokenizer cache's modules (0.2-0.5 s a rank). The collector follows the recipe of CPython's
`gc.freeze` for a process that forks without exec: off during the imports (they run ~20% faster: 3.5 against 4.3-4.7
CPU s, one process, load 11), every object frozen before a fork (a rank's collections never walk the ~0.8M objects
the imports made, nor dirty their pages), on again in the child. The warm-up child is forked, not spawned, once numba
is imported and its target ready: it loads or compiles the kernels without starting an interpreter, numpy and numba
again (~0.8 s of CPU on the launch's path where the cache holds them).
"""
from __future__ import annotations

import gc

gc.disable()     # before the imports: see the module docstring (gc.freeze's fork recipe)

import atexit  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from typing import NoReturn  # noqa: E402

import numpy as np  # noqa: E402

BOOT_ENV = dict(os.environ)     # before any import could read or change it: what every rank's must equal
PER_RANK = frozenset({"YETO_NATS_CREDS", "OMP_NUM_THREADS"})     # read after the imports (the launcher's own list)


def listening(argv: list[str]) -> socket.socket | None:
    """`--socket-fd N`: the listening Unix socket the stack made and handed over (infra/stack/zygote.py), bound and
    listening before this process started: a launcher can connect at once."""
    if "--socket-fd" not in argv:
        return None
    return socket.socket(fileno=int(argv[argv.index("--socket-fd") + 1]))


LISTEN = listening(sys.argv)


def num_threads() -> int:
    return len(os.listdir("/proc/self/task"))


BLAS_THREADS = num_threads()     # the main thread and OpenBLAS's pool (fork-safe: see the module docstring)

from yeto.learners import kernels_warm  # noqa: E402

kernels_warm.prepare()       # numba imported and its CPU target ready: no thread (a fork check below counts them)


def warm_child() -> int:
    """The codec kernels, compiled into numba's on-disk cache (or loaded from it) by a forked child while the imports
    below run (not in this process: a parallel kernel compiled or loaded starts numba's threads); its pid. `ready` does
    not wait for it: on an empty cache (a fresh install) the compile took longer than the imports and held every rank
    back until it ended (benchmarks/results/startup/README.md). A rank forked before it ends builds its model and reads
    its data meanwhile; its warm-up thread waits for the child's end on a pipe only the child writes to
    (kernels_warm.after), then loads the kernels from the cache, so no rank compiles them beside the child.
    The child leads a session of its own, as every process of the stack does (components.spawn): with the kernel's
    autogroup scheduling (Linux's default on desktops and this box: /proc/sys/kernel/sched_autogroup_enabled), CPU is
    shared session by session, and a compile in the zygote's session took its share from the zygote's imports."""
    sys.stdout.flush()
    sys.stderr.flush()
    done, held = os.pipe()       # EOF on `done` once the child ended: it alone holds `held`
    pid = os.fork()
    if pid:
        os.close(held)
        kernels_warm.after(done)
        return pid
    os.close(done)
    code = 1
    try:
        os.setsid()              # an autogroup of its own (the docstring)
        os.dup2(2, 1)            # its line to the log: stdout is the launcher's answers
        if LISTEN is not None:
            os.close(LISTEN.detach())     # the socket stays the zygote's
        code = kernels_warm.main()
    except BaseException:  # noqa: BLE001 - logged; the ranks' own warm-up threads compile what it could not
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)       # never into the rest of this module: one zygote


WARM = warm_child()

import torch  # noqa: E402

from yeto.learners.torch import quant  # noqa: E402

quant.keep_out_unless(False)     # before transformers: the launcher forks no NF4 island from here

# What the model build imports, paid here once: the Auto classes, Llama's modules (the tiny test model's and
# SmolLM2's architecture; another architecture imports its own in the child), peft (LoRA) and the bus client.
import peft  # noqa: E402,F401
import transformers.models.llama.modeling_llama  # noqa: E402,F401
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402,F401

from yeto.infra import gguf_tokenizer  # noqa: E402,F401 - the data
from yeto.learners import bus_client  # noqa: E402
from yeto.learners.data import collate, gguf_model, iter_blocks, spec  # noqa: E402,F401


def conversion_mappings() -> None:
    """transformers' checkpoint-name conversions, built once per process on a model's first load (a regex compile of
    every architecture's ~700 patterns: 0.9 of a forked rank's 5.5 profiled seconds, load 22), built here for the ranks.
    An older transformers without them has nothing to build."""
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    except ImportError:
        return
    get_checkpoint_conversion_mapping("llama")


conversion_mappings()
from yeto.learners.torch import __main__ as entry  # noqa: E402
from yeto.learners.transport import logs_setup  # noqa: E402,F401
from yeto.schemas.learner_contract import FORKED, backend  # noqa: E402


def reap(*_: object) -> None:
    """SIGCHLD: collect every ended child (a zombie would read as dead to the launcher anyway: infra/procs.py); the
    warm-up child's failure is logged, not fatal: the ranks' own warm-up threads compile what it could not."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == WARM and (code := os.waitstatus_to_exitcode(status)):     # its output and traceback: this log
            print(f"codec kernel warm-up exited {code}", file=sys.stderr, flush=True)


def exit_code(err: SystemExit) -> int:
    return err.code if isinstance(err.code, int) else (0 if err.code is None else 1)


TORCH = backend("torch").module
MODULES = FORKED
"""The learners a rank forked from here may run (`python -m` of each): the registry's forkable backends."""


def learner_main(module: str):
    """The `main(argv)` of the learner `module` (one of MODULES): the torch learner's is imported already, another's
    module is imported here, in the forked rank."""
    if module == TORCH:
        return entry
    import importlib
    return importlib.import_module(f"{module}.__main__")


def child(request: dict, sockets: tuple[socket.socket, ...] = ()) -> NoReturn:
    """The forked rank: its group, its output, its environment, then the learner; its status to the exit file."""
    gc.enable()         # its own objects collected; the zygote's stay frozen (fork below)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for s in sockets:       # the zygote's listening socket and its launcher's connection stay the zygote's
        os.close(s.detach())     # the descriptor itself (a makefile's reference would keep a close() from it)
    if not request.get("session"):
        os.setpgid(0, request["pgid"])
    out = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.close(null)
    os.environ.clear()
    os.environ.update(request["env"])
    if threads := os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(threads))
    np.random.seed()
    bus_client.BEFORE_EXIT.append(lambda status: write_exit(request["exit_file"], status))   # refused by the bus
    code = 1
    try:
        learner = learner_main(request.get("module", TORCH))
        sys.argv = [learner.__file__, *request["argv"]]
        code = learner.main(request["argv"])
    except SystemExit as err:
        code = exit_code(err)
    except BaseException:  # noqa: BLE001 - what an uncaught error does to a spawned rank: a traceback, status 1
        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()
        logging.shutdown()
        write_exit(request["exit_file"], code)
    os._exit(code)


def write_exit(path: str, code: int) -> None:
    """The rank's status where the launcher reads it (services/launcher/backends/local.py), its output flushed first."""
    sys.stdout.flush()
    sys.stderr.flush()
    with open(path, "w") as f:
        f.write(f"{code}\n")


COERCED = frozenset({"C.UTF-8", "C.utf8", "UTF-8"})
"""LC_CTYPE values CPython sets in its own environment under the C locale (PEP 538): a spawned rank without the
variable would set the same one itself."""


def env_differs(env: dict) -> set[str]:
    """The variables (names only) other than PER_RANK in which a request's environment differs from this zygote's."""
    differ = {k for k in env.keys() | BOOT_ENV.keys() if env.get(k) != BOOT_ENV.get(k)} - PER_RANK
    if "LC_CTYPE" not in env and BOOT_ENV.get("LC_CTYPE") in COERCED:
        differ.discard("LC_CTYPE")
    return differ


def fork(request: dict, sockets: tuple[socket.socket, ...] = ()) -> dict:
    if (n := num_threads()) > BLAS_THREADS:     # fewer after a first fork: OpenBLAS restarts its pool lazily
        return {"error": f"the zygote runs {n} threads, more than {BLAS_THREADS}: a fork could copy a lock held"}
    if differ := env_differs(request["env"]):
        return {"error": f"the rank's environment differs from the zygote's in {', '.join(sorted(differ)[:5])}"}
    if (module := request.get("module", TORCH)) not in MODULES:
        return {"error": f"{module} is not a learner this zygote forks ({', '.join(sorted(MODULES))})"}
    sys.stdout.flush()
    gc.freeze()         # the child's collections skip every object made before it (and leave their pages shared)
    session = bool(request.get("session"))
    led, leads = os.pipe() if session else (-1, -1)     # EOF on `led` once the child leads its session (or ended)
    pid = os.fork()
    if pid == 0:
        try:
            if session:
                os.close(led)
                os.setsid()     # before the answer: the launcher signals the group `pid` as soon as it has it
                os.close(leads)
            child(request, sockets)
        except BaseException:  # noqa: BLE001 - failed before its learner ran (its group gone, its log unwritable)
            traceback.print_exc()
            with contextlib.suppress(OSError), open(request["exit_file"], "w") as f:
                f.write("1\n")
        finally:
            os._exit(1)     # never back into the zygote's loop: a second reader of its requests
    if session:
        os.close(leads)
        os.read(led, 1)         # b"" once the child's end of the pipe closed: setsid done, or the child gone
        os.close(led)
        return {"pid": pid}
    try:
        os.setpgid(pid, request["pgid"] or pid)    # as the child does: whichever runs first, the group is set
    except OSError:
        pass     # the child set it already and may have started its learner
    return {"pid": pid}


def answer(line: str, sockets: tuple[socket.socket, ...] = ()) -> str:
    try:
        out = fork(json.loads(line), sockets)
    except (ValueError, KeyError, OSError) as err:
        out = {"error": f"{type(err).__name__}: {err}"}
    if "error" in out:
        print(f"not forked: {out['error']}", file=sys.stderr, flush=True)
    return json.dumps(out) + "\n"


def serve(server: socket.socket) -> None:
    """The stack's zygote: one connection at a time, until a signal ends the zygote (a launcher connects once per
    request, services/launcher/backends/stack_zygote.py: a connection kept open would hold every other launcher's)."""
    while True:
        conn, _ = server.accept()
        with conn, conn.makefile("r") as lines:
            try:
                for line in lines:
                    conn.sendall(answer(line, (server, conn)).encode())
            except OSError as err:      # the launcher went mid-request: the next one connects again
                print(f"launcher connection lost: {err}", file=sys.stderr, flush=True)


def main() -> int:
    signal.signal(signal.SIGCHLD, reap)
    reap()          # the warm-up child, if it ended during the imports
    if LISTEN is None:
        print(json.dumps({"ready": os.getpid()}), flush=True)
    print(f"ready: pid {os.getpid()}, imports done", file=sys.stderr, flush=True)   # its log (benchmarks/startup.py)
    if LISTEN is not None:
        serve(LISTEN)
    for line in sys.stdin:
        sys.stdout.write(answer(line))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
