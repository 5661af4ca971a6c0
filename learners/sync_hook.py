"""The step boundary as a training loop sees it (its SyncHook): DilocoSync over a Transport, for every backend.

The loop calls `join()` before the first step and `after_step(step, tokens)` after each; both return
whether parameters changed (the loop then broadcasts them to the island's other ranks). Nothing here
waits on the network except `join`'s bounded wait.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from yeto.learners.diloco_sync import ArrayAdapter, DilocoSync, send
from yeto.learners.transport.protocol import StepReport, Transport
from yeto.schemas.recipe import SyncConfig


class DilocoHook:
    """Rank 0's side of the protocol: initial pushes, joining from the latest globals, then per step the
    one door `DilocoSync.step_boundary`."""

    def __init__(self, sync: DilocoSync, transport: Transport, *, join_wait_s: float = 10.0, sends_init: bool = True,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.sync, self.transport, self.join_wait_s, self.sends_init = sync, transport, join_wait_s, sends_init
        self.clock, self.sleep = clock, sleep
        self._last_step_at: float | None = None
        self.join_s: float | None = None     # how long join() took (the `done` line's, for benchmarks/startup.py)
        self._ended = False                  # end_training ran: the final pushes are sent
        self.first_merge_wait_s = sync.config.first_merge_wait_s     # spent (0) after one wait that timed out
        self.first_merge_waited_s = 0.0      # how long this learner waited for the run's first merged rounds

    def join(self) -> bool:
        """Join the run: the learner that `sends_init` (island 0 of a fresh run) offers its initial values at
        once (the syncer adopts the first as version 0); the others wait up to `join_wait_s` for a global
        version of every fragment (version 0 equal to their own values is adopted by checksum, with no
        download) and offer their own values only for fragments still without one, then wait as long
        again. A (re)started learner begins from the run's latest globals, a fresh run's learners from the
        same seeded values anyway; either way training starts when the waits end."""
        started = self.clock()
        if self.sends_init:
            send(self.transport, self.sync.init_pushes())
        changed = self._joined()
        missing = set() if self.sends_init else set(self.sync.missing())
        if missing:
            send(self.transport, [push for push in self.sync.init_pushes() if push.header.fragment in missing])
            changed = self._joined() or changed
        self._last_step_at = self.clock()
        self.join_s = self._last_step_at - started
        return changed

    def _joined(self) -> bool:
        """Globals taken until every fragment has a version, up to `join_wait_s`; True if parameters changed."""
        return self._take_globals(lambda: all(v is not None for v in self.sync.versions.values()), self.join_wait_s)[0]

    def _take_globals(self, until: Callable[[], bool], wait_s: float) -> tuple[bool, bool]:
        """Take and apply the globals that arrive until `until()` holds or `wait_s` has passed; (parameters changed,
        `until` held). Polling, not an arrival signal: in-process wires deliver on other threads' calls, and a
        simulated clock advances only through `sleep`."""
        deadline, changed = self.clock() + wait_s, False
        while True:
            self.sync.receive(self.transport)
            changed = self.sync.apply_globals() or changed
            self.sync.request_keyframes(self.transport)
            if until():
                return changed, True
            if self.clock() >= deadline:
                return changed, False
            self.sleep(0.05)

    def after_step(self, step: int, tokens: int) -> bool:
        now = self.clock()
        step_time = None if self._last_step_at is None else now - self._last_step_at
        self._last_step_at = now
        changed = self.sync.step_boundary(step, tokens, self.transport, step_time_s=step_time)
        if self.first_merge_wait_s > 0 and self.sync.ahead_of_first_merge():
            changed = self._wait_first_merge() or changed
        return changed

    def _wait_first_merge(self) -> bool:
        """Two pushes of a fragment out and the run has merged no round of it (SyncConfig.first_merge_wait_s): take
        globals until one lands, up to the bound; once the bound runs out, never again (a syncer that never merges
        costs this learner one bound, not one per interval)."""
        started = self.clock()
        changed, merged = self._take_globals(lambda: not self.sync.ahead_of_first_merge(), self.first_merge_wait_s)
        if not merged:
            print(f"no round merged {self.first_merge_wait_s:g}s after two pushes of fragments "
                  f"{self.sync.ahead_of_first_merge()}: training on without waiting again", file=sys.stderr, flush=True)
            self.first_merge_wait_s = 0.0
        waited = self.clock() - started
        self.first_merge_waited_s += waited
        if self._last_step_at is not None:
            self._last_step_at += waited      # the wait is not the next step's time
        return changed

    def progress(self, result: StepReport) -> None:
        self.transport.progress(result)

    def stats(self) -> dict[str, int]:
        """What the protocol cost this learner: keyframes adopted by checksum or fetched, chunks dropped, bytes."""
        return dict(adopted=self.sync.keyframes.num_adopted, keyframes_requested=self.sync.keyframes.num_requested,
                    dropped_chunks=self.sync.num_dropped, bytes_sent=self.transport.bytes_sent,
                    bytes_fetched=self.transport.bytes_fetched)

    def end_training(self) -> None:
        """Push the last partial interval of every fragment. The transport still sends events (the final evaluation's
        beats) until `close`; it takes no more globals."""
        if not self._ended:
            send(self.transport, self.sync.final_pushes(self.transport.take_back))
            self.transport.end_training()
            self._ended = True

    def beat(self, step: int, done: int, total: int, *, final: bool) -> None:
        """A held-out evaluation after `step` advanced to `done` of `total` batches (the transport rate-limits)."""
        self.transport.beat(step, done, total, final=final)

    def close(self) -> None:
        """End training (if not yet ended), then let the transport flush (bounded) and close."""
        self.end_training()
        self.transport.close()


def make_hook(arrays: ArrayAdapter, sync: dict[str, Any], transport: Transport, *, run_id: str, learner: str,
              generation: int, sends_init: bool = True, join_wait_s: float = 10.0) -> DilocoHook:
    """DilocoSync over any backend's arrays with a recipe's `sync` options, behind the hook a loop calls."""
    diloco = DilocoSync(arrays, SyncConfig.from_dict(sync), run_id=run_id, learner=learner, generation=generation)
    return DilocoHook(diloco, transport, join_wait_s=join_wait_s, sends_init=sends_init)
