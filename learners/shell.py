"""The learner process's lifecycle, written once for every backend, and the Backend protocol each implements.

`python -m yeto.learners.<name>` is `sys.exit(shell.main(TheBackend()))`:

    parse the contract (schemas/learner_contract.py) -> secrets file -> log lines to the bus (rank 0)
    -> backend.build -> a `start` line saying how the island runs -> the sync hook (rank 0), LearnerStarted
    -> train batches from the data position -> held-out set
    -> backend.train, each step: evaluate when due, its metrics to the tape (batched), a line to stdout
    -> final pushes -> final evaluation -> the transport closed -> `done` and `sync` lines -> backend.close

The final pushes go out before the final evaluation: an evaluation of many seconds sends no chunk, and a learner
silent that long stops counting as live (services/syncer/liveness.py), so its peers' last pushes would merge
without its own. Every evaluation beats (LearnerBeat, rate-limited) as its batches advance, so one of minutes is not
taken for a frozen island by the launcher (services/launcher/liveness.py); a hung one stays silent. A user error (a
bad recipe, a base other than the pinned one) is a ValueError: one `error: ...` line on stderr and the bus, exit
status 2.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any, Protocol, TypeVar

from yeto.learners import console, kernels_warm
from yeto.learners.diloco_sync import ArrayAdapter
from yeto.learners.step import StepResult
from yeto.learners.sync_hook import DilocoHook, make_hook
from yeto.schemas.learner_contract import BackendInfo, LearnerArgs

log = logging.getLogger("yeto.learner")   # with sync, its lines go to the run's log stream too (`yeto logs`)
T = TypeVar("T")


class Backend(Protocol):
    """What a backend supplies; the shell does the rest. `built` is the backend's own record of a built rank."""

    info: BackendInfo
    devices: tuple[str, ...] | None
    """--device choices (None: any string)."""
    max_ranks: int | None
    """Ranks one island of this backend may run (None: any)."""

    def load_recipe(self, text: str) -> Any:
        """The recipe from its JSON text (ValueError naming a bad field)."""

    def build(self, recipe: Any, args: LearnerArgs) -> Any:
        """Device policy, process group and model of this rank, ready to train."""

    def rank(self, built: Any) -> int:
        """This process's rank in its island: rank 0 alone syncs and prints."""

    def describe(self, built: Any, recipe: Any) -> dict[str, Any]:
        """How this island runs, for its first line: ranks, shard mode, tuning, dtype, quantization, device, and
        the trainable and total parameter counts."""

    def arrays(self, built: Any) -> ArrayAdapter:
        """The trainable tensors the sync hook reads and writes (rank 0)."""

    def on_rank0(self, built: Any, call: Callable[[], T] | None) -> T | None:
        """Run a sync call on rank 0 while the island's other ranks serve the collectives it needs."""

    def train_batches(self, built: Any, recipe: Any, args: LearnerArgs) -> Iterator[Any]:
        """This rank's training micro-batches from the start of its data shard."""

    def heldout(self, built: Any, recipe: Any) -> list[Any]:
        """The held-out batches this rank evaluates ([] where it evaluates nothing)."""

    def train(self, built: Any, batches: Iterator[Any], recipe: Any, *, sync: DilocoHook | None,
              on_step: Callable[[StepResult], None], start_step: int) -> list[StepResult]:
        """Train to the recipe's end, calling the sync hook and `on_step` after every optimizer step."""

    def evaluate(self, built: Any, heldout: list[Any]) -> float:
        """The held-out loss."""

    def close(self, built: Any) -> None:
        """Release the process group and devices."""


class OneRank:
    """Defaults for a backend whose island is one process (MLX, diffusion): no collectives, nothing to close."""

    max_ranks: int | None = 1

    def rank(self, built: Any) -> int:
        return 0

    def on_rank0(self, built: Any, call: Callable[[], T] | None) -> T | None:
        return call() if call is not None else None

    def close(self, built: Any) -> None:
        return None


def load_env_file() -> None:
    """$YETO_ENV_FILE: a cloud island's secrets (HF_TOKEN, ...), a file mount of a JSON object of names to strings."""
    if name := os.environ.get("YETO_ENV_FILE"):
        try:
            os.environ.update({str(k): str(v) for k, v in json.loads(Path(name).expanduser().read_text()).items()})
        except (OSError, ValueError, AttributeError) as e:
            raise ValueError(f"$YETO_ENV_FILE={name}: not a JSON object of names to strings ({type(e).__name__})") from None


def recipe_text(recipe: str) -> str:
    """--recipe is the JSON itself or a file holding it."""
    return recipe if recipe.lstrip().startswith("{") else Path(recipe).read_text()


def contract_rank(args: LearnerArgs) -> int:
    """The rank the contract gives (--rank, else $RANK as torchrun sets it, else 0): known before anything is built."""
    return args.rank if args.rank is not None else int(os.environ.get("RANK", 0))


def check_ranks(backend: Backend, args: LearnerArgs) -> None:
    world_size = args.world_size if args.world_size is not None else int(os.environ.get("WORLD_SIZE", 1))
    if backend.max_ranks is not None and (world_size > backend.max_ranks or contract_rank(args) >= backend.max_ranks):
        raise ValueError(f"a {backend.info.name} island runs {backend.max_ranks} rank(s), not {world_size}: give its "
                         f"--gpu entry count {backend.max_ranks} (docs/LEARNER.md, backends)")


def connect(backend: Backend, built: Any, recipe: Any, args: LearnerArgs, how: dict[str, Any]) -> DilocoHook:
    """The production hook: the NATS transport of learners/bus_client.py (connect, reconnect with backoff, buffer
    while disconnected; LearnerStarted saying `how` the island runs, then LearnerProgress events) under the DiLoCo
    step boundary."""
    if not args.nats_url:
        raise ValueError("--nats-url is required unless --no-sync is given")
    from yeto.learners import bus_client  # the NATS client only where it is used
    transport = bus_client.connect(nats_url=args.nats_url, run_id=args.run_id, learner=args.learner,
                                   generation=args.generation, head_rendezvous=args.head_rendezvous)
    transport.declare_started(how)
    # Version 0 needs one copy of the initial values on the wire: island 0 of the run's first generation
    # sends it; everyone else adopts it by checksum (or, if it never comes, sends its own after the wait).
    hook = make_hook(backend.arrays(built), recipe.sync, transport, run_id=args.run_id, learner=args.learner,
                     generation=args.generation, sends_init=args.learner_index == 0 and args.generation == 0)
    transport.declare_layout(hook.sync.layout)   # on the tape, and how the finalizer names the final tensors
    return hook


class Console:
    """The learner's stdout lines (console.py's format), copied to its log (and so to the bus with sync)."""

    def __init__(self, fmt: str, every_s: float) -> None:
        self.fmt, self.every_s, self.last = fmt, every_s, -math.inf

    def emit(self, **fields: Any) -> None:
        line = console.render(fields, self.fmt)
        print(line, flush=True)
        log.info(line)

    def step(self, result: StepResult, held: float | None) -> None:
        if held is not None or time.monotonic() - self.last >= self.every_s:
            self.last = time.monotonic()
            grad_norm = None if result.grad_norm is None else round(result.grad_norm, 5)
            self.emit(event="step", step=result.step, loss=round(result.loss, 5), tokens=result.tokens,
                      seconds=round(result.seconds, 4), lr=result.lr, grad_norm=grad_norm, synced=result.synced,
                      heldout=held)


def since_process_start() -> float | None:
    """Seconds since this process started (Linux's /proc, to its 10 ms clock tick; None elsewhere): the imports' time
    at the shell's entry, on the `start` line for benchmarks/startup.py."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        return round(float(Path("/proc/uptime").read_text().split()[0]) - ticks / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError):
        return None


class FirstItemClock(Iterator[T]):
    """An iterator that times how long its first item took to come: the first training batch's wait."""

    def __init__(self, items: Iterator[T]) -> None:
        self.items, self.first_s = items, None

    def __next__(self) -> T:
        if self.first_s is not None:
            return next(self.items)
        started = time.monotonic()
        try:
            return next(self.items)
        finally:
            self.first_s = time.monotonic() - started


class Beating(list[Any]):
    """The held-out batches, saying through the hook (rank 0's; None elsewhere) how far an evaluation is as a backend
    iterates them: a beat after each batch is evaluated (when the backend asks for the next)."""

    def __init__(self, batches: list[Any], sync: DilocoHook | None, step: int, *, final: bool) -> None:
        super().__init__(batches)
        self.sync, self.step, self.final = sync, step, final

    def __iter__(self) -> Iterator[Any]:
        total = len(self)
        for done, batch in enumerate(super().__iter__(), 1):
            yield batch
            if self.sync is not None:
                self.sync.beat(self.step, done, total, final=self.final)


def run(backend: Backend, args: LearnerArgs) -> float:
    """Train this rank to the recipe's end; return the final held-out loss (NaN where this rank evaluates nothing).
    Start-up costs are measured for benchmarks/startup.py: `import_s` and `build_s` on the `start` line, `connect_s`,
    `data_s` (training batches and held-out set made, the first batch drawn) on the `done` line, and with sync
    `join_s` (the initial globals' join before the first step) and `first_batch_s` (the first batch's part of
    `data_s`, drawn inside the first step's seconds)."""
    import_s = since_process_start()
    out = Console(console.log_format(args.log_format), args.log_every_s)
    console.quiet()
    recipe = backend.load_recipe(recipe_text(args.recipe))
    check_ranks(backend, args)
    if not args.no_sync and contract_rank(args) == 0 and args.nats_url:
        from yeto.learners.transport.logs_setup import install  # before the model is built: set-up errors too
        install(args.nats_url, run_id=args.run_id, learner=args.learner, generation=args.generation,
                head_rendezvous=args.head_rendezvous)
    if not args.no_sync:        # the codec kernels compile (or load) while the model loads: kernels_warm.py
        kernels_warm.start()
    started = time.monotonic()
    built = backend.build(recipe, args)
    try:
        rank = backend.rank(built)
        how = {"backend": backend.info.name, **backend.describe(built, recipe)} if rank == 0 else {}
        if rank == 0:           # the first line says how the island runs (so do `yeto logs` and LearnerStarted)
            out.emit(event="start", **how, import_s=import_s, build_s=round(time.monotonic() - started, 3))
        started = time.monotonic()
        sync = None if args.no_sync else backend.on_rank0(built, lambda: connect(backend, built, recipe, args, how))
        connect_s, started = time.monotonic() - started, time.monotonic()
        # A replacement continues its predecessor: same shard order, past the micro-batches already trained on.
        start_step = max(args.start_step, recipe.start_step)
        batches = FirstItemClock(islice(backend.train_batches(built, recipe, args), start_step * recipe.grad_accum, None))
        heldout = backend.heldout(built, recipe)
        data_s = time.monotonic() - started
        eval_every = args.eval_every or recipe.eval_every

        def on_step(result: StepResult) -> None:
            due = bool(eval_every and result.step % eval_every == 0 and heldout)
            held = backend.evaluate(built, Beating(heldout, sync, result.step, final=False)) if due else None
            if rank != 0:
                return
            if sync is not None:     # an evaluated step is reported at once, its eval loss on the tape
                sync.progress(result if held is None else replace(result, eval_loss=held))
            out.step(result, held)

        started = time.monotonic()
        results = backend.train(built, batches, recipe, sync=sync, on_step=on_step, start_step=start_step)
        elapsed = time.monotonic() - started
        if not args.no_sync:     # the last pushes, before the final evaluation (the module docstring says why)
            backend.on_rank0(built, sync.end_training if sync is not None else None)
        last_step = results[-1].step if results else start_step
        held = backend.evaluate(built, Beating(heldout, sync, last_step, final=True)) if heldout else math.nan
        if not args.no_sync:     # the beats sent, the transport flushes what is queued and closes
            backend.on_rank0(built, sync.close if sync is not None else None)
        if rank == 0:
            join_s = getattr(sync, "join_s", None)      # DilocoHook's; a hook that never joined has none
            joined = {"join_s": round(join_s, 3), "first_batch_s": round(batches.first_s or 0.0, 3),
                      "first_merge_wait_s": round(getattr(sync, "first_merge_waited_s", 0.0), 3)} \
                if join_s is not None else {}
            out.emit(event="done", steps=len(results), tokens=sum(r.tokens for r in results),
                     seconds=round(elapsed, 3), heldout=held, connect_s=round(connect_s, 3),
                     data_s=round(data_s + (batches.first_s or 0.0), 3), **joined)
        if sync is not None:
            out.emit(event="sync", **sync.stats())
        return held
    finally:
        backend.close(built)


def parse(backend: Backend, argv: list[str] | None) -> LearnerArgs:
    return LearnerArgs.parse(argv, prog=backend.info.module, devices=backend.devices,
                             description=f"A Yeto learner island ({backend.info.summary}).")


def main(backend: Backend, argv: list[str] | None = None) -> int:
    """The process: exit 0 when trained, 2 with one `error: ...` line on a user error (argparse's own usage errors
    exit 2 too)."""
    try:
        args = parse(backend, argv)
        load_env_file()     # before anything reads the environment (the Hub's token)
        run(backend, args)
    except ValueError as err:
        log.error("error: %s", err)   # to stderr (logging's last resort, or install's handler), and the bus
        return 2
    return 0
