"""The DDP and Yeto arms of benchmarks/wan.py: the same learner program, the same recipe, over the shaped links.

ddp:  `python -m yeto.learners.torch --no-sync` as a 2-rank island whose ranks sit in different
      namespaces: gloo all-reduces every step's gradients through the hub (GLOO_SOCKET_IFNAME = the veth).
yeto: the real stack (nats-server, tape, syncer, finalizer, planner) on the hub; the run is published as
      `yeto launch` builds it (LaunchRun -> the launcher's RunLaunched), but the launcher process is stopped
      first so that the two learners are started here, one per namespace, reaching nats through the links.
      What the launcher serves the learners, the hub serves in its place: their watch consumers, made when a
      learner asks (infra/bus/nats_watch_maker.py; a learner's credential may make none, so without it no learner
      ever adopts a global model).
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from lib_wan_net import Wan, since
from lib_wan_proc import LEARNER, Proc

HERE = Path(__file__).resolve().parent


def build_launch(run_id: str, model: Path, data: Path, *, steps: int, learners: int, extra: list[str], lr: float = 3e-3,
                 sync_set: dict | None = None):
    """The LaunchRun `yeto launch` would publish for `learners` local CPU islands, at peak inner lr `lr`; `sync_set`
    overrides fields of its sync recipe that `yeto launch` has no flag for (wan.py --sync-set, e.g. grace_max_s)."""
    from yeto.cli.launch import checks
    from yeto.cli.launch import command as cli_launch
    from yeto.cli.main import build_parser
    args = build_parser().parse_args(
        ["launch", "--gpu", ",".join(["local:1xcpu"] * learners), "--model", str(model), "--data", str(data),
         "--tuning", "full", "--lr", repr(lr), "--max-steps", str(steps), "--seq-len", "128", "--micro-batch", "4",
         "--run-id", run_id, *extra])
    islands = checks.parse_fleet(args.gpu)
    launch = cli_launch.build_launch(args, run_id, checks.fleet_entries(islands, spot=False, prices=[0.0] * learners))
    if sync_set:
        from yeto.schemas.recipe import SyncConfig
        train = launch.recipe["train"]
        train["sync"] = SyncConfig(**{**SyncConfig.from_dict(train["sync"]).to_dict(), **sync_set}).to_dict()
    return args, launch


def learner_flags(eval_every: int) -> list[str]:
    return ["--device", "cpu", "--eval-every", str(eval_every), "--log-every-s", "0"]


def run_ddp(wan: Wan, recipe: dict, work: Path, *, eval_every: int, timeout: float) -> tuple[list[Proc], tuple[int, int]]:
    """Two ranks, one per namespace; returns the processes (rank 0 first) and bytes (up, down) on the links."""
    path = work / "ddp-recipe.json"
    path.write_text(json.dumps({k: v for k, v in recipe.items() if k != "sync"}))
    before, t0 = wan.bytes(), time.monotonic()
    procs = [Proc([*link.prefix(), *LEARNER, "--run-id", "ddp", "--learner", "ddp", "--recipe", str(path), "--no-sync",
                   "--rank", str(r), "--world-size", str(len(wan.links)), "--local-rank", "0",
                   "--master-addr", wan.links[0].ns_ip, "--master-port", "29611", *learner_flags(eval_every)],
                  log=work / f"ddp-{r}.log", env={"GLOO_SOCKET_IFNAME": link.ns_if}, t0=t0)
             for r, link in enumerate(wan.links)]
    from lib_wan_proc import wait_all
    wait_all(procs, timeout)
    return procs, since(wan, before)


class YetoHub:
    """The stack under `home` with the launcher stopped, and a forwarder onto each link's hub address."""

    def __init__(self, wan: Wan, home: Path) -> None:
        from yeto.infra import stack
        self.wan, self.home = wan, home
        self.rec = stack.up(home, watch=False)    # no watchdog: it would start the launcher stopped here again
        os.kill(self.rec["pids"]["launcher"], signal.SIGTERM)    # learners are started here, in namespaces
        self.port = int(self.rec["port"])
        self.proxy = subprocess.Popen([sys.executable, str(HERE / "lib_wan_proxy.py"), f"127.0.0.1:{self.port}",
                                       *(f"{link.hub_ip}:{self.port}" for link in wan.links)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.proxy.stdout.readline().strip() == b"listening", "the forwarder did not start"
        self._watches = WatchMaker(self.rec["url"])

    def app_bytes(self) -> tuple[int, int]:
        """NATS bytes the forwarder carried so far (learners -> server, server -> learners)."""
        self.proxy.stdin.write(b"totals\n")
        self.proxy.stdin.flush()
        up, down = self.proxy.stdout.readline().split()
        return int(up), int(down)

    def url(self, i: int) -> str:
        return f"nats://{self.wan.links[i].hub_ip}:{self.port}"

    def publish(self, launch) -> None:
        """The run's data events and RunLaunched, and what the stopped launcher would announce once they run."""
        from yeto.cli.launch import checks
        from yeto.services.launcher.api import decide_launch as launcher_decides
        self._announce([*checks.data_events(launch), launcher_decides(launch)[0].msg, *self.islands_up(launch)])

    @staticmethod
    def islands_up(launch) -> list:
        """IslandUp of every island, generation 0: the syncer admits only learners the launcher announced."""
        from yeto.schemas.base import derive_id
        from yeto.schemas.fleet import IslandUp
        return [IslandUp(id=derive_id(launch.run_id, "IslandUp", i, 0), run_id=launch.run_id, source="wan-bench", island=i,
                         generation=0, spec=spec, price_per_hour=float(spec.get("price_per_hour") or 0.0),
                         backend="local", handle="wan")
                for i, spec in enumerate(launch.fleet)]

    def exited(self, launch, codes: dict[int, int | None], generations: dict[int, int] | None = None) -> float:
        """IslandExited of each island in `codes` (of its generation in `generations`, else 0; exit code None =
        killed), as the stopped launcher's process watcher would publish it (the syncer stops counting the island
        as live; the finalizer stops waiting for its acknowledgement); returns the wall time just before publishing."""
        from yeto.schemas.base import derive_id
        from yeto.schemas.fleet import IslandExited
        gens = generations or {}
        return self._announce([IslandExited(id=derive_id(launch.run_id, "IslandExited", i, gens.get(i, 0)),
                                            run_id=launch.run_id, source="wan-bench", island=i, generation=gens.get(i, 0),
                                            spec=launch.fleet[i], backend="local", handle="wan", exit_code=code,
                                            detail="SIGKILL (wan.py)" if code is None else "")
                               for i, code in codes.items()])

    def replaced(self, launch, island: int, generation: int) -> float:
        """IslandReplaced of `island` by `generation`, as the stopped launcher announces the replacement it starts
        (the syncer admits that generation from then on); returns the wall time just before publishing."""
        from yeto.schemas.base import derive_id
        from yeto.schemas.fleet import IslandReplaced
        spec = launch.fleet[island]
        return self._announce([IslandReplaced(id=derive_id(launch.run_id, "IslandReplaced", island, generation),
                                              run_id=launch.run_id, source="wan-bench", island=island, generation=generation,
                                              previous_generation=generation - 1, spec=spec,
                                              price_per_hour=float(spec.get("price_per_hour") or 0.0), backend="local",
                                              handle="wan")])

    def _announce(self, events: list) -> float:
        import time

        from yeto.infra.bus import connect

        async def go() -> None:
            bus = await connect(self.rec["url"], name="wan-bench")
            try:
                for event in events:
                    await bus.publish(event)
            finally:
                await bus.close()
        at = time.time()
        asyncio.run(go())
        return at

    def credential(self, run_id: str, learner: str) -> dict[str, str]:
        """The learner's own bus credential (issued as the launcher would), as the environment it reads it from."""
        from yeto.infra.bus import auth as bus_auth
        path = bus_auth.issue_learner(self.home, run_id, learner)
        return {bus_auth.CREDS_ENV: str(path)} if path else {}

    def finalize(self, run_id: str, *, timeout: float = 180.0) -> Path:
        """FinalCutRequested (reason max_steps) for a run whose learners finished; returns the artifact directory
        once ArtifactWritten is on the event stream."""
        from yeto.infra.bus import connect
        from yeto.schemas.base import derive_id, parse
        from yeto.schemas.final import FinalCutRequested
        from yeto.schemas.subjects import event_subject

        async def go() -> Path:
            bus = await connect(self.rec["url"], name="wan-bench")
            written = asyncio.get_running_loop().create_future()

            async def on_artifact(raw) -> None:
                if not written.done():
                    written.set_result(Path(parse(raw.data).local_path))
            try:
                watch = await bus.watch(event_subject(run_id, "ArtifactWritten"), on_artifact)
                await bus.publish(FinalCutRequested(id=derive_id(run_id, "wan-final-cut"), run_id=run_id, source="wan-bench",
                                                    reason="max_steps", detail="the benchmark's learners finished"))
                try:
                    return await asyncio.wait_for(written, timeout)
                except asyncio.TimeoutError:
                    raise RuntimeError(f"no ArtifactWritten for {run_id} within {timeout:.0f}s; "
                                       f"see {self.home}/logs/finalizer.log") from None
                finally:
                    await watch.close()
            finally:
                await bus.close()
        return asyncio.run(go())

    def close(self) -> None:
        from yeto.infra import stack
        self._watches.close()
        if self.proxy.poll() is None:
            self.proxy.kill()
            self.proxy.wait()
        stack.down(self.home)


class WatchMaker:
    """The stopped launcher's watch maker (infra/bus/nats_watch_maker.serve) on its own thread and event loop."""

    def __init__(self, url: str) -> None:
        self._ready, self._error = threading.Event(), None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(url),), name="wan-watches", daemon=True)
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None or not self._ready.is_set():
            raise RuntimeError(f"the hub's watch maker did not start: {self._error!r}")

    async def _serve(self, url: str) -> None:
        from yeto.infra.bus import connect, nats_watch_maker
        try:
            bus = await connect(url, name="wan-watches")
        except Exception as e:  # noqa: BLE001 - said by __init__
            self._error = e
            self._ready.set()
            return
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        serving = asyncio.create_task(nats_watch_maker.serve(bus, self._stop))
        await asyncio.sleep(0)          # serve subscribes; the flush's PONG comes after the server has the SUB
        await bus.nc.flush()
        self._ready.set()
        try:
            await serving
        finally:
            await bus.close()

    def close(self) -> None:
        if self._error is None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(30)


def start_yeto(hub: YetoHub, launch, work: Path, *, eval_every: int) -> list[Proc]:
    """Publish the run and start one learner per island of its fleet, island i in namespace i (a fleet smaller than
    the star, as yeto-survivors', leaves the last namespaces idle); returns the learner processes."""
    hub.publish(launch)
    path = work / f"{launch.run_id}-recipe.json"
    path.write_text(json.dumps(launch.recipe["train"]))
    t0 = time.monotonic()
    return [start_learner(hub, launch, work, i, eval_every=eval_every, t0=t0) for i in range(len(launch.fleet))]


def start_learner(hub: YetoHub, launch, work: Path, i: int, *, eval_every: int, t0: float, generation: int = 0,
                  start_step: int = 0) -> Proc:
    """Learner `i` in its namespace: generation 0 at the run's start, or a replacement resuming at `start_step` (the
    island's last reported step, as the launcher starts one: services/launcher/logic.py)."""
    from yeto.schemas.fleet import learner_name
    path, n = work / f"{launch.run_id}-recipe.json", len(launch.fleet)
    return Proc([*hub.wan.links[i].prefix(), *LEARNER, "--run-id", launch.run_id, "--learner", learner_name(i),
                 "--generation", str(generation), "--start-step", str(start_step), "--nats-url", hub.url(i),
                 "--recipe", str(path), "--learner-index", str(i), "--num-learners", str(n), *learner_flags(eval_every)],
                log=work / f"{launch.run_id}-{i}{f'-g{generation}' if generation else ''}.log", t0=t0,
                env=hub.credential(launch.run_id, learner_name(i)))


def eval_artifact(recipe: dict, artifact: Path, work: Path) -> float:
    """Held-out loss of a full-model artifact, measured as the learners measure theirs (the learner program
    with no steps left: `--start-step max_steps --no-sync` evaluates the model it loaded)."""
    path = work / f"eval-{artifact.parent.name}-recipe.json"
    # The artifact is the model now: the base's pins (and the sync settings) are not its own.
    deploy = artifact / "artifact"      # the output folder's deployable files
    path.write_text(json.dumps({**{k: v for k, v in recipe.items() if k not in ("sync", "pins")}, "model": str(deploy)}))
    proc = Proc([*LEARNER, "--run-id", "eval", "--learner", "eval", "--recipe", str(path), "--no-sync",
                 "--start-step", str(recipe["max_steps"]), "--device", "cpu"], log=work / f"eval-{artifact.parent.name}.log")
    proc.wait(600)
    done = proc.done()
    if not done or done.get("heldout") is None:
        raise RuntimeError(f"evaluating {artifact} printed no held-out loss; see {proc.log}")
    return float(done["heldout"])
