"""Deterministic in-process islands: the real DilocoHook/DilocoSync and SyncerCore over a simulated clock and network.

Each island is a thread running the real training loop (learners/torch/loop.py); its step boundary
waits for its turn in simulated time (island m's step k ends at k * step_s[m]), so the order in which
pushes reach the syncer and globals reach learners is the same on every run, whatever the host's load.
Pushes and globals are chunked and their headers re-parsed exactly as NATS carries them, and arrive
`latency_s` of simulated time after they are sent. Nothing in the sync math is re-implemented here.
"""
from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable

from yeto.learners.api import DilocoHook, LocalTransport
from yeto.schemas.fragments import FragmentHeader, split_chunks
from yeto.services.syncer.api import SyncerCore, perform


class SimNet:
    """The syncer core and every learner's inbox, driven by simulated time (call under the turnstile)."""

    def __init__(self, core: SyncerCore, *, latency_s: float = 0.0, chunk_bytes: int = 64 * 1024) -> None:
        self.core, self.latency_s, self.chunk_bytes = core, latency_s, chunk_bytes
        self.queue: list = []
        self.seq = itertools.count()
        self.inboxes: dict[str, list] = {}
        self.events: list = []
        self.bytes_up = self.bytes_down = 0
        self.bytes_by_kind: dict[str, int] = {}   # up and down by message kind (init, push, delta, keyframe)
        self.t = 0.0                     # simulated time of the outputs being performed

    def _at(self, t: float, kind: str, data) -> None:
        heapq.heappush(self.queue, (t, next(self.seq), kind, data))

    def _wire(self, header: FragmentHeader, payload: bytes):
        for h, chunk in split_chunks(header, payload, self.chunk_bytes):
            yield FragmentHeader.from_nats(h.to_nats()), bytes(chunk)

    def advance(self, now: float) -> None:
        """Deliver every message and syncer wake-up due by `now`, in time order."""
        while self.queue and self.queue[0][0] <= now:
            t, _, kind, data = heapq.heappop(self.queue)
            if kind == "push":
                self.perform(self.core.receive(*data, t), t)
            elif kind == "wake":
                self.perform(self.core.tick(t), t)
            else:
                name, header, chunk = data
                if name in self.inboxes:
                    self.inboxes[name].append((header, chunk))

    def perform(self, outputs, t: float) -> None:
        """The core's outputs at simulated time `t`: globals reach inboxes `latency_s` later."""
        self.t = t
        perform(outputs, self)

    # outputs.Sink (snapshots are not kept)
    def chunk(self, header: FragmentHeader, chunk: bytes) -> None:
        self.bytes_down += len(chunk) * len(self.inboxes)       # every learner receives it
        self._count(header.kind, len(chunk) * len(self.inboxes))    # (keyframes too: a real learner reads their headers)
        h = FragmentHeader.from_nats(header.to_nats())
        for name in self.inboxes:
            self._at(self.t + self.latency_s, "global", (name, h, bytes(chunk)))

    def _count(self, kind: str, num_bytes: int) -> None:
        self.bytes_by_kind[kind] = self.bytes_by_kind.get(kind, 0) + num_bytes

    def wake(self, at: float) -> None:
        self._at(at, "wake", None)

    def event(self, event) -> None:
        self.events.append(event)

    def snapshot(self, snap) -> None:
        pass

    snapshot_later = snapshot

    def transport(self, name: str, clock: Callable[[], float]):
        net = self
        inbox = self.inboxes.setdefault(name, [])

        class Transport(LocalTransport):
            def send_push(self, header, payload):
                net.bytes_up += len(payload)
                net._count(header.kind, len(payload))
                for h, chunk in net._wire(header, payload):
                    net._at(clock() + net.latency_s, "push", (h, chunk))

            def poll_globals(self):
                net.advance(clock())
                out = list(inbox)
                inbox.clear()
                return out
        return Transport()

    def leave(self, name: str) -> None:
        """A learner that died: nothing is delivered to it any more."""
        self.inboxes.pop(name, None)


class Turnstile:
    """Lets island step boundaries run one at a time in (simulated time, island) order."""

    def __init__(self, islands: list[str]) -> None:
        self.cv = threading.Condition()
        self.next = {name: (0.0, i) for i, name in enumerate(islands)}
        self.rank = {name: i for i, name in enumerate(islands)}

    def enter(self, name: str, t: float) -> None:
        with self.cv:
            self.next[name] = (t, self.rank[name])
            self.cv.notify_all()
            self.cv.wait_for(lambda: min(self.next.values()) == (t, self.rank[name]))

    def leave(self, name: str, t_next: float) -> None:
        with self.cv:
            self.next[name] = (t_next, self.rank[name])
            self.cv.notify_all()

    def finish(self, name: str) -> None:
        with self.cv:
            self.next.pop(name, None)
            self.cv.notify_all()


class SimClock:
    """One island's simulated clock; `sleep` advances it (the hook's bounded join wait)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class TurnHook:
    """The loop's SyncHook: the real DilocoHook, entered at simulated step boundaries in turn.
    `stop_after` ends the island early (a preemption): the loop sees it through `on_step`."""

    def __init__(self, hook: DilocoHook, clock: SimClock, turn: Turnstile, name: str, step_s: float,
                 start_s: float = 0.0) -> None:
        self.hook, self.clock, self.turn, self.name, self.step_s, self.start_s = hook, clock, turn, name, step_s, start_s
        self.tokens = self.boundaries = 0

    def join(self) -> bool:
        self.turn.enter(self.name, self.start_s)
        self.clock.t = self.start_s
        try:
            return self.hook.join()
        finally:
            self.start_s = self.clock.t          # a join wait moved the clock
            self.turn.leave(self.name, self.start_s + self.step_s)

    def after_step(self, step: int, tokens: int) -> bool:
        self.boundaries += 1                     # steps since this island started (a replacement resumes mid-run)
        t = self.start_s + self.boundaries * self.step_s
        self.turn.enter(self.name, t)
        self.clock.t = t
        self.tokens += tokens
        try:
            return self.hook.after_step(step, tokens)
        finally:
            self.turn.leave(self.name, t + self.step_s)


def run_islands(bodies: list[Callable[[], None]], turn: Turnstile, names: list[str]) -> None:
    """Each island's body on its own thread, leaving the turnstile when it ends; the first failure is raised after all
    have joined."""
    errors: list[BaseException] = []

    def island(m: int) -> None:
        try:
            bodies[m]()
        except BaseException as e:  # noqa: BLE001 - any failure of the island's thread, surfaced after join
            errors.append(e)
        finally:
            turn.finish(names[m])
    threads = [threading.Thread(target=island, args=(m,), daemon=True) for m in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
