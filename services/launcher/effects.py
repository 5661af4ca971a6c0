"""The launcher's I/O: perform Spawn/Kill through the island's backend, and watch the backends for exits."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from yeto.infra import procs
from yeto.infra.bus.nats_watch_maker import drop_watches
from yeto.infra.runner import Context, Retry
from yeto.schemas.base import Message, derive_id
from yeto.schemas.fleet import IslandExited, IslandReplaced, IslandStopped, IslandUp, learner_name
from yeto.services.launcher.backends.base import Backend, IslandLaunch, IslandRef
from yeto.services.launcher.logic import SOURCE, Kill, Spawn
from yeto.services.launcher.reach import island_url
from yeto.services.launcher.refusals import refusal
from yeto.services.launcher.state import State, backend_of

log = logging.getLogger(__name__)


class Effects:
    """Holds the backends (by name) and the URL local learners reach the stack at (cloud ones: the run's bus_url)."""

    def __init__(self, backends: dict[str, Backend], nats_url: str, *, poll_s: float = 1.0,
                 revoke: Callable[[str], int] | None = None):
        self.backends, self.nats_url, self.poll_s = backends, nats_url, poll_s
        self.revoke, self.revoked = revoke, set[str]()   # revoke(run): its learner credentials (infra/bus/auth.py)

    def backend(self, spec: dict) -> Backend:
        name = backend_of(spec)
        if name not in self.backends:
            raise Retry(f"no {name} backend configured on this launcher", delay_s=30)
        return self.backends[name]

    async def act(self, intent, ctx: Context) -> list[Message]:
        if isinstance(intent, Spawn):
            return [m for m in [await self.spawn(intent, ctx)] if m is not None]
        if isinstance(intent, Kill):
            return [await self.kill(intent)]
        raise AssertionError(f"unknown launcher intent {intent!r}")

    async def spawn(self, intent: Spawn, ctx: Context | None = None) -> Message | None:
        c = intent.cmd
        launch = IslandLaunch(run_id=c.run_id, island=c.island, generation=c.generation, spec=c.spec, recipe=c.recipe,
                              num_islands=c.num_islands, nats_url=island_url(c.spec, c.recipe, self.nats_url),
                              start_step=c.start_step)
        backend = self.backend(c.spec)
        try:
            handle = await asyncio.to_thread(backend.start, launch)
        except Exception as e:  # a cloud may say no for now: try again later
            refused = refusal(c.spec, str(e), run_id=c.run_id, island=c.island, generation=c.generation, source=SOURCE,
                              price_per_hour=c.price_per_hour)
            if refused is not None and ctx is not None:    # on the tape: the planner avoids the offer for a while
                await ctx.bus.publish(refused)
            raise Retry(f"starting island {c.island} generation {c.generation}: {e}", delay_s=10) from e
        if backend.name == "external":     # a slot opened: up once its learner connects (services/launcher/external.py)
            return None
        fields = dict(run_id=c.run_id, source=SOURCE, island=c.island, generation=c.generation, spec=c.spec,
                      price_per_hour=c.price_per_hour, backend=backend.name, handle=handle)
        if c.generation == 0:
            return IslandUp(id=derive_id(c.run_id, "IslandUp", c.island, 0), **fields)
        return IslandReplaced(id=derive_id(c.run_id, "IslandReplaced", c.island, c.generation),
                              previous_generation=c.generation - 1, **fields)

    async def kill(self, intent: Kill) -> Message:
        c = intent.cmd
        backend = self.backend(c.spec)
        await asyncio.to_thread(backend.stop, c.run_id, c.island, c.generation, intent.handle)
        return IslandStopped(id=derive_id(c.run_id, "IslandStopped", c.island, c.generation), run_id=c.run_id,
                             source=SOURCE, island=c.island, generation=c.generation, spec=c.spec,
                             price_per_hour=c.price_per_hour, backend=backend.name, handle=intent.handle, reason=c.reason)

    def exits(self, state: State) -> list[IslandExited]:
        """One IslandExited per island generation that is up in the state but no longer runs: one batch status
        call per backend for all its islands (a cloud backend reads its job list at most as often as it allows)."""
        out = []
        for name, backend in self.backends.items():
            up = [(run.run_id, isl) for run in state.values() for isl in run.islands
                  if isl.phase == "up" and backend_of(isl.spec) == name]
            if not up:
                continue
            seen = backend.statuses([IslandRef(rid, isl.index, isl.generation, isl.handle) for rid, isl in up])
            out += [IslandExited(
                id=derive_id(rid, "IslandExited", isl.index, isl.generation), run_id=rid, source=SOURCE,
                island=isl.index, generation=isl.generation, spec=isl.spec, price_per_hour=isl.price_per_hour,
                backend=name, handle=isl.handle, exit_code=st.exit_code, detail=st.detail)
                for (rid, isl), st in zip(up, seen, strict=True) if not st.running]
        return out

    def revoke_ended(self, state: State) -> list[str]:
        """A run that ended (finalized, stopped, failed) loses its learners' bus credentials (once per process); returns
        the runs whose credentials were live until now."""
        revoked = []
        for run in [r for r in state.values() if r.ended and r.run_id not in self.revoked] if self.revoke else []:
            if num := self.revoke(run.run_id):
                log.info("run %s ended (%s): %d learner credential(s) revoked", run.run_id, run.ended, num)
                revoked.append(run.run_id)
            self.revoked.add(run.run_id)
        return revoked

    def watcher(self) -> Callable[[Context], asyncio.Future]:
        async def watch(ctx: Context) -> None:
            while not ctx.stop.is_set():
                _reap()
                try:
                    for run_id in await asyncio.to_thread(self.revoke_ended, ctx.state):   # nothing pulls them now
                        await drop_watches(ctx.bus, run_id, [learner_name(i) for i in range(len(ctx.state[run_id].islands))])
                except Exception:  # a credential file unreadable now: try again next time
                    log.exception("launcher: revoking ended runs' credentials failed")
                try:
                    for event in await asyncio.to_thread(self.exits, ctx.state):
                        await ctx.bus.publish(event)
                except Exception:  # a backend hiccup: look again next time
                    log.exception("launcher: island status poll failed")
                try:
                    await asyncio.wait_for(ctx.stop.wait(), self.poll_s)
                except asyncio.TimeoutError:
                    pass
        return watch


def _reap() -> None:
    """Collect exited learner children of this process so they do not linger as zombies."""
    procs.reap_children()
