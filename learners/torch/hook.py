"""The torch learner's step boundary: learners/diloco_sync.py over the module's trainable parameters and
an injected Transport, shaped as the loop's SyncHook (returns whether parameters changed)."""
from __future__ import annotations

import time
from collections.abc import Callable

from yeto.learners.diloco_sync import DilocoSync, Transport, request
from yeto.learners.torch.adapter import TorchArrays
from yeto.schemas.recipe import SyncConfig


class DilocoHook:
    """Rank 0's side of the protocol: initial pushes, joining from the latest globals, then per step
    poll -> apply -> push. Nothing here waits on the network except `catch_up`'s bounded join wait."""

    def __init__(self, sync: DilocoSync, transport: Transport, *, join_wait_s: float = 10.0, sends_init: bool = True,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.sync, self.transport, self.join_wait_s, self.sends_init = sync, transport, join_wait_s, sends_init
        self.clock, self.sleep = clock, sleep
        self._last_step_at: float | None = None
        self._acked = False

    def _poll(self) -> None:
        for header, chunk in self.transport.poll_globals():
            self.sync.offer(header, chunk)

    def catch_up(self) -> bool:
        """Join the run: the learner that `sends_init` (island 0 of a fresh run) offers its initial values at
        once (the syncer adopts the first as version 0); the others wait up to `join_wait_s` for a global
        version of every fragment (version 0 equal to their own values is adopted by checksum, with no
        download) and offer their own values only for fragments still without one, then wait as long
        again. A (re)started learner begins from the run's latest globals, a fresh run's learners from the
        same seeded values anyway; either way training starts when the waits end."""
        if self.sends_init:
            self._send(self.sync.init_pushes())
        changed = self._wait()
        missing = set() if self.sends_init else set(self.sync.missing())
        if missing:
            self._send([push for push in self.sync.init_pushes() if push.header.fragment in missing])
            changed = self._wait() or changed
        self._last_step_at = self.clock()
        return changed

    def _send(self, pushes) -> None:
        for push in pushes:
            self.transport.send_push(push.header, push.payload)

    def _wait(self) -> bool:
        deadline, changed = self.clock() + self.join_wait_s, False
        while True:
            self._poll()
            changed = self.sync.catch_up() or changed
            request(self.transport, self.sync.keyframes_wanted())
            if all(v is not None for v in self.sync.versions.values()) or self.clock() >= deadline:
                return changed
            self.sleep(0.05)

    def after_step(self, step: int, tokens: int) -> bool:
        now = self.clock()
        step_time = None if self._last_step_at is None else now - self._last_step_at
        self._last_step_at = now
        self._poll()
        before = dict(self.sync.versions)
        self._send(self.sync.after_step(step, tokens, step_time_s=step_time))
        request(self.transport, self.sync.keyframes_wanted())
        self._ack_final()
        return self.sync.versions != before

    def _ack_final(self) -> None:
        """Once the run's final versions are marked and applied here, acknowledge them (once): the finalizer
        then tears the island down at once instead of waiting out its acknowledgement timeout."""
        final = getattr(self.transport, "final_versions", lambda: None)()
        if self._acked or not final:
            return
        mine = {p: v for p, v in final.items() if p in self.sync.versions}
        if all(self.sync.versions[p] is not None and self.sync.versions[p] >= v for p, v in mine.items()):
            self._acked = True
            self.transport.ack_final(mine)

    def progress(self, result) -> None:
        """Forward a step's progress to the transport when it publishes progress events."""
        report = getattr(self.transport, "progress", None)
        if report is not None:
            report(result)

    def stats(self) -> dict:
        """What the protocol cost this learner: keyframes adopted by checksum or fetched, chunks dropped, bytes."""
        return dict(adopted=self.sync.num_adopted, keyframes_requested=len(self.sync.requested), dropped_chunks=self.sync.num_dropped,
                    bytes_sent=getattr(self.transport, "bytes_sent", None), bytes_fetched=getattr(self.transport, "bytes_fetched", None))

    def close(self) -> None:
        """Push the last partial interval of every fragment, then let the transport flush (bounded) and close."""
        self._send(self.sync.final_pushes())
        close = getattr(self.transport, "close", None)
        if close is not None:
            close()


def make_hook(model, recipe, transport: Transport, *, run_id: str, learner: str, generation: int,
              join_wait_s: float = 10.0, sends_init: bool = True) -> DilocoHook:
    """DilocoSync over `model`'s trainable parameters (the unwrapped module) with the recipe's sync options."""
    sync = DilocoSync(TorchArrays.of(model), SyncConfig.from_dict(recipe.sync), run_id=run_id, learner=learner,
                      generation=generation)
    return DilocoHook(sync, transport, join_wait_s=join_wait_s, sends_init=sends_init)


def connect_sync(built, recipe, args) -> DilocoHook:
    """The production hook: the NATS transport of learners/bus_client.py (connect, reconnect with
    backoff, buffer while disconnected, LearnerProgress events)."""
    if not args.nats_url:
        raise ValueError("--nats-url is required unless --no-sync is given")
    from yeto.learners import bus_client
    transport = bus_client.connect(nats_url=args.nats_url, run_id=args.run_id, learner=args.learner,
                                   generation=args.generation)
    # Version 0 needs one copy of the initial values on the wire: island 0 of the run's first generation
    # sends it; everyone else adopts it by checksum (or, if it never comes, sends its own after the wait).
    hook = make_hook(built.model, recipe, transport, run_id=args.run_id, learner=args.learner,
                     generation=args.generation, sends_init=args.learner_index == 0 and args.generation == 0)
    transport.declare_layout(hook.sync.layout)   # on the tape, and how the finalizer names the final tensors
    return hook
