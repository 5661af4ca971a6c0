"""Local islands: one process group per island generation, one learner process per rank, logs captured.

Layout under `<state>/runs/<run>/` (found again by a restarted launcher and by `yeto chaos kill`):
    recipe.json                           the learners' TrainRecipe
    logs/island-<i>.log                   every generation's output, appended (what `yeto logs` tails)
    islands/<i>/g<gen>/group.json         the process group id, the ranks' pids and start times ("ended" once over)
    islands/<i>/g<gen>/start.claim        made (O_EXCL) by the one launcher instance that starts the generation
    islands/<i>/g<gen>/rank-<r>.exit      the rank's exit status, written on exit by its shell wrapper (a spawned
                                          rank) or by the rank itself (one forked from the zygote, backends/zygote.py)
A group whose ranks are gone without exit files was killed (SIGKILL leaves no status behind).
A group is signalled only while a recorded rank still runs in it with its recorded start time, so a stale
record never reaches a process that reused the pid. Each island's learners connect with the island's own
credential (infra/bus/auth.py), handed over as a path in $YETO_NATS_CREDS, never on their command line.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from yeto.infra import procs
from yeto.infra.bus import auth as bus_auth
from yeto.infra.run_paths import run_path
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.services.launcher.backends.base import IslandLaunch, IslandRef, IslandStatus, learner_args
from yeto.services.launcher.backends.stack_zygote import StackZygote
from yeto.services.launcher.backends.zygote import Zygote

# `sh -c WRAP exitfile cmd...` runs cmd, then records its status: the one thing a non-parent can read later.
WRAP = '"$@"; echo $? > "$0"'
RankArgv = Callable[[IslandLaunch, Path, int, int], list[str]]
STOP_GRACE_S = 10.0     # SIGTERM, then SIGKILL for a group still alive this long after (a rank stuck in a C call)
KILLED_WITHIN_S = 5.0   # how long stop() waits for SIGKILLed ranks to be gone (a kill is delivered, not done, at once)


def torch_learner(launch: IslandLaunch, recipe_path: Path, rank: int, port: int) -> list[str]:
    """The run's learner backend (schemas/learner_contract.py) for one rank of a local island."""
    module = LaunchRecipe.upcast(launch.recipe).learner_module     # yeto.learners.torch, or .diffusion
    args = learner_args(launch, recipe_path).but(
        rank=rank, world_size=int(launch.spec.get("count", 1)), local_rank=rank, master_addr="127.0.0.1",
        master_port=port, device=launch.spec.get("gpu") if launch.spec.get("gpu") in ("cuda", "npu") else "cpu")
    return [sys.executable, "-m", module, *args.to_argv()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_alive(group: dict) -> bool:
    """A recorded group still runs: one of its ranks lives, the very process recorded (start time)."""
    members = {int(p): t for p, t in group.get("started_at", {}).items()}
    return not group.get("ended") and procs.group_is_ours(group["pgid"], members)


def last_error(log: Path, generation: int) -> str:
    """The learner's last `error: ...` line of this generation in the island's log ('' when none), so the reason an
    island refused to train (a base file other than the pinned one, bad data) reaches the tape in IslandExited."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    starts = [i for i, line in enumerate(lines) if line.startswith("=== island ") and line.endswith(f" {generation} ===")]
    errors = [line for line in lines[starts[-1] if starts else 0:] if line.startswith("error: ")]
    return errors[-1].removeprefix("error: ")[:1000] if errors else ""


CLAIMED_WAIT_S = 120.0     # a start another instance claimed: its ranks' forks may wait on a zygote still importing


def claim(path: Path) -> bool:
    """Whether this process now holds the claim `path` (O_EXCL: of two launcher instances given one StartIsland, a
    redelivery while the first still starts it, one makes it). A claim whose claimant died before the generation's
    group was recorded (kill -9 mid-start) is taken over; a live claimant's never."""
    me = json.dumps({"pid": os.getpid(), "started_at": procs.started_at(os.getpid())})
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            if claimant_alive(path):
                return False
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as f:
            f.write(me)
        return True
    return False


def claimant_alive(path: Path) -> bool:
    try:
        who = json.loads(path.read_text())
    except (OSError, ValueError):
        return True             # being written (or gone at this instant): its claimant is alive
    return procs.alive(int(who["pid"]), who.get("started_at"))


def wait_for_group(gdir: Path, timeout_s: float) -> Path | None:
    """The group.json of a start another instance claimed, once written; None once its claimant died without one (the
    caller claims it again); an error after `timeout_s` (the command is retried)."""
    group, deadline = gdir / "group.json", time.monotonic() + timeout_s
    while not group.exists():
        if not claimant_alive(gdir / "start.claim"):
            return None
        if time.monotonic() > deadline:
            raise RuntimeError(f"{gdir.name} of this island was claimed by another launcher instance, which recorded no "
                               f"process group within {timeout_s:.0f}s")
        time.sleep(0.2)
    return group


def cpu_threads(env: dict[str, str], ranks_here: int, cores: int | None = None) -> dict[str, str]:
    """OMP_NUM_THREADS for a CPU rank: every local island shares this host, so its cores are split between the ranks
    instead of oversubscribed; a setting already in the environment (the user's) is kept."""
    if "OMP_NUM_THREADS" in env:
        return {}
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    return {"OMP_NUM_THREADS": str(max(1, cores // max(1, ranks_here)))}


class LocalBackend:
    name = "local"

    def __init__(self, state_dir: Path, *, rank_argv: RankArgv = torch_learner, env: dict[str, str] | None = None,
                 zygote: bool = False):
        """`zygote`: start a pre-imported torch learner now (backends/zygote.py) and fork CPU islands' ranks from it;
        the launcher service's backend does, a backend made to read or signal islands does not."""
        self.state_dir, self.rank_argv, self.env = Path(state_dir), rank_argv, env or {}
        self.zygote = (StackZygote.attach(self.state_dir) or      # the stack's, started before this launcher
                       Zygote(self.base_env(), self.state_dir / "logs" / "learner-zygote.log")) if zygote else None

    def base_env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        env.pop(bus_auth.CREDS_ENV, None)      # never the launcher's own (service) credential
        return env

    def run_dir(self, run_id: str) -> Path:
        return run_path(self.state_dir, run_id)

    def gen_dir(self, run_id: str, island: int, generation: int) -> Path:
        return self.run_dir(run_id) / "islands" / str(island) / f"g{generation}"

    def log_path(self, run_id: str, island: int) -> Path:
        return self.run_dir(run_id) / "logs" / f"island-{island}.log"

    def start(self, launch: IslandLaunch) -> str:
        gdir = self.gen_dir(launch.run_id, launch.island, launch.generation)
        if (gdir / "group.json").exists():     # started before (a redelivered StartIsland): never twice
            return str(json.loads((gdir / "group.json").read_text())["pgid"])
        gdir.mkdir(parents=True, exist_ok=True)
        while not claim(gdir / "start.claim"):     # another launcher instance is starting it now: never twice
            if (group := wait_for_group(gdir, CLAIMED_WAIT_S)) is not None:
                return str(json.loads(group.read_text())["pgid"])
        recipe_path = self.run_dir(launch.run_id) / "recipe.json"
        train = LaunchRecipe.upcast(launch.recipe).learner_recipe()
        # whole or absent: every island's start rewrites it, and a rank forked from the zygote reads it at once (a
        # truncated read failed island 0's first generation in tests/e2e/test_e2e_faults.py at 0a0c824)
        tmp = recipe_path.with_name(f"recipe.json.{os.getpid()}.{launch.island}.tmp")
        tmp.write_text(json.dumps(train, indent=2, sort_keys=True))
        os.replace(tmp, recipe_path)
        log = self.log_path(launch.run_id, launch.island)
        log.parent.mkdir(parents=True, exist_ok=True)
        port, pgid, pids = free_port(), 0, []
        env = self.base_env()
        creds = bus_auth.issue_learner(self.state_dir, launch.run_id, launch.learner, launch.generation)
        if creds is not None:
            env[bus_auth.CREDS_ENV] = str(creds)
        if launch.spec.get("gpu", "cpu") == "cpu":
            env.update(cpu_threads(env, launch.num_islands * int(launch.spec.get("count", 1))))
        with open(log, "ab") as out:
            out.write(f"=== island {launch.island} generation {launch.generation} ===\n".encode())
            out.flush()
            forks = self.zygote is not None and launch.spec.get("gpu", "cpu") == "cpu" and \
                train.get("base_quantization") != "nf4"     # the zygote touches no device and keeps NF4 out
            # Every spawned rank's Popen is kept until the last rank is started: a dropped one is reaped by the next
            # Popen, and a leader that exited at once would take its process group with it (the next rank: EPERM).
            spawned: list[subprocess.Popen] = []
            ranks = int(launch.spec.get("count", 1))
            # A one-rank island leads a session of its own, as each of the stack's services does: with Linux's
            # autogroup scheduling the CPU is shared session by session (learners/torch/zygote.py's docstring).
            session = ranks == 1
            for rank in range(ranks):
                exit_file, argv = gdir / f"rank-{rank}.exit", self.rank_argv(launch, recipe_path, rank, port)
                pid = self.zygote.fork(argv, env, log=log, exit_file=exit_file, pgid=pgid, session=session) \
                    if forks else None
                if pid is None:
                    spawned.append(subprocess.Popen(["sh", "-c", WRAP, str(exit_file), *argv], stdout=out,
                                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                                    **({"start_new_session": True} if session else {"process_group": pgid})))
                    pid = spawned[-1].pid
                pgid = pgid or pid
                pids.append(pid)
        started = {str(p): procs.started_at(p) for p in pids}
        record = gdir / "group.json.tmp"       # whole or absent: another instance may be waiting to read it
        record.write_text(json.dumps({"pgid": pgid, "pids": pids, "started_at": started}))
        os.replace(record, gdir / "group.json")
        return str(pgid)

    def status(self, run_id: str, island: int, generation: int, handle: str) -> IslandStatus:
        gdir = self.gen_dir(run_id, island, generation)
        try:
            group = json.loads((gdir / "group.json").read_text())
        except (OSError, ValueError):
            return IslandStatus(False, None, "no record of this island's processes")
        alive = group_alive(group)    # before reading exit files: a rank that ends in between has written its file
        codes = {}
        for f in gdir.glob("rank-*.exit"):
            text = f.read_text().strip()
            if text:
                codes[int(f.stem.split("-")[1])] = int(text)
        failed = {r: c for r, c in codes.items() if c != 0}
        if not alive and not group.get("ended"):    # over: nothing may signal this group id again
            (gdir / "group.json").write_text(json.dumps({**group, "ended": True}))
        if failed:
            rank, code = min(failed.items())
            why = last_error(self.log_path(run_id, island), generation)
            return IslandStatus(False, code, f"rank {rank} exited with status {code}" + (f": {why}" if why else ""))
        if alive:
            return IslandStatus(True)
        if len(codes) == len(group["pids"]):
            return IslandStatus(False, 0, "every rank finished")
        return IslandStatus(False, None, "killed: the processes are gone without an exit status")

    def statuses(self, islands: list[IslandRef]) -> list[IslandStatus]:
        return [self.status(*ref) for ref in islands]     # local files and /proc: cheap at every 1 s poll

    def stop(self, run_id: str, island: int, generation: int, handle: str, *, sig: int = signal.SIGTERM) -> None:
        """Signal the generation's process group. SIGTERM (the launcher's stop) ends it: SIGCONT follows, since a
        frozen (SIGSTOPped) rank keeps a pending SIGTERM until it runs again, and a group still alive STOP_GRACE_S
        later gets SIGKILL and is waited for (up to KILLED_WITHIN_S) until its processes are gone. Any other signal is
        sent as it is (`yeto chaos`, tests)."""
        try:
            group = json.loads((self.gen_dir(run_id, island, generation) / "group.json").read_text())
            if not group_alive(group):      # still the processes recorded, never a stranger with a reused id
                return
            os.killpg(group["pgid"], sig)
            if sig != signal.SIGTERM:
                return
            os.killpg(group["pgid"], signal.SIGCONT)
            members = {int(p): t for p, t in group.get("started_at", {}).items()}
            if not procs.exit_within(procs.group_members(group["pgid"]), STOP_GRACE_S) \
                    and procs.group_has_ours(group["pgid"], members):
                os.killpg(group["pgid"], signal.SIGKILL)
                procs.exit_within(procs.group_members(group["pgid"]), KILLED_WITHIN_S)
        except (OSError, ValueError, KeyError, ProcessLookupError):
            pass

    def current_generation(self, run_id: str, island: int) -> int | None:
        """The newest generation started for an island (what `yeto chaos kill` aims at)."""
        gens = [int(p.name[1:]) for p in (self.run_dir(run_id) / "islands" / str(island)).glob("g*") if p.name[1:].isdigit()]
        return max(gens) if gens else None
