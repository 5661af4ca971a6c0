"""The learner's one way to the bus: a NATS connection on a background thread, never blocking a step.

The training thread calls `send_push` (queues the chunks and returns), `poll_globals` (takes what
arrived) and `progress` (rate-limited LearnerProgress events). The background thread publishes with
JetStream acks and reconnects with backoff; while the server is away training goes on, and of the
pushes of one fragment only the newest is kept (a push carries everything since the anchor, so a newer
one supersedes an older one). Globals come from two ordered consumers: the recent deltas, and the
headers only of the latest keyframe of every fragment; a keyframe's payload (f32, 4 bytes a parameter)
crosses the link only when the learner asks for it (`fetch`: a direct get by stream sequence), so a
learner following the deltas pays nothing for periodic keyframes and a joining one reads the whole
model once. A third consumer watches
for the run's CheckpointMarkedFinal, which the learner acknowledges with LearnerFinalAck once it holds
those versions.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict, deque

from nats.js.api import DeliverPolicy

from yeto.infra.bus import Bus
from yeto.schemas.base import Event, derive_id, parse
from yeto.schemas.final import LearnerFinalAck
from yeto.schemas.fragments import FragmentHeader, split_chunks
from yeto.schemas.layout import LayoutDeclared, TensorEntry
from yeto.schemas.subjects import GLOB_PREFIX, event_subject, fragment_subject, keyframe_subject, stream_for
from yeto.schemas.training import LearnerProgress

log = logging.getLogger(__name__)


class NatsTransport:
    """diloco_sync's Transport over NATS JetStream, plus learner events."""

    def __init__(self, nats_url: str, *, run_id: str, learner: str, generation: int, progress_every_s: float = 2.0):
        self.url, self.run_id, self.learner, self.generation = nats_url, run_id, learner, generation
        self.progress_every_s = progress_every_s
        self._pushes: OrderedDict[int, tuple[FragmentHeader, bytes]] = OrderedDict()   # fragment -> newest push
        self._events: deque[Event] = deque(maxlen=1000)
        self._inbox: deque[tuple[FragmentHeader, bytes]] = deque()
        self._lock = threading.Lock()
        self._wake: asyncio.Event | None = None
        self._stop = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._tokens, self._last_progress, self._started = 0, 0.0, time.monotonic()
        self._last_result = self._reported = None
        self.bytes_sent = self.bytes_fetched = 0
        self._bus: Bus | None = None
        # announced keyframes: (fragment, version) -> (num_chunks, {chunk: stream sequence})
        self._keyseqs: dict[tuple[int, int], tuple[int, dict[int, int]]] = {}
        self._wanted: set[tuple[int, int]] = set()                   # asked for, not fetched yet
        self._final: dict[int, int] | None = None      # the run's final versions, once CheckpointMarkedFinal is out
        self._thread = threading.Thread(target=self._run, name=f"bus-{learner}", daemon=True)
        self._thread.start()

    # -- the training thread's side -------------------------------------------------------------------
    def send_push(self, header: FragmentHeader, payload: bytes) -> None:
        with self._lock:
            self._pushes.pop((header.fragment, header.kind), None)
            self._pushes[(header.fragment, header.kind)] = (header, payload)
        self._kick()

    def fetch(self, header: FragmentHeader) -> None:
        """Download an announced keyframe (all its chunks); they arrive through `poll_globals`."""
        self._loop.call_soon_threadsafe(self._want, (header.fragment, header.version))

    def poll_globals(self) -> list[tuple[FragmentHeader, bytes | None]]:
        with self._lock:
            out = list(self._inbox)
            self._inbox.clear()
        return out

    def publish_event(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)
        self._kick()

    def final_versions(self) -> dict[int, int] | None:
        """The versions the finalizer marked final (None while the run trains)."""
        with self._lock:
            return self._final

    def ack_final(self, versions: dict[int, int]) -> None:
        """Tell the finalizer this learner holds the final versions (it then stops waiting for us)."""
        self.publish_event(LearnerFinalAck(
            id=derive_id(self.run_id, "LearnerFinalAck", self.learner, self.generation), run_id=self.run_id,
            source=self.learner, learner=self.learner, generation=self.generation, versions=versions))

    def declare_layout(self, layout) -> None:
        """Publish the fragment layout (learners/layout.py's Layout) once per generation."""
        tensors = [TensorEntry(name=t.name, shape=list(t.shape), dtype=t.dtype, fragment=p)
                   for p, frag in enumerate(layout.fragments) for t in frag]
        self.publish_event(LayoutDeclared(
            id=derive_id(self.run_id, "LayoutDeclared", self.learner, self.generation), run_id=self.run_id,
            source=self.learner, learner=self.learner, generation=self.generation, fingerprint=layout.fingerprint,
            num_fragments=layout.num_fragments, tensors=tensors))

    def progress(self, result, *, force: bool = False) -> None:
        """A LearnerProgress event at most every `progress_every_s` (always with `force`); tokens accumulate."""
        if not force:
            self._tokens += result.tokens
            self._last_result = result
        now = time.monotonic()
        if not force and now - self._last_progress < self.progress_every_s:
            return
        self._last_progress, self._reported = now, result
        self.publish_event(LearnerProgress(
            id=derive_id(self.run_id, "LearnerProgress", self.learner, self.generation, result.step), run_id=self.run_id,
            source=self.learner, learner=self.learner, generation=self.generation, step=result.step, loss=result.loss,
            tokens=self._tokens, tokens_per_s=self._tokens / max(now - self._started, 1e-9),
            step_time_s=result.seconds, lr=result.lr))

    def close(self, flush_s: float = 30.0) -> None:
        """Report the last step (the rate limit may have held it back), publish what is queued (bounded wait),
        then disconnect."""
        if self._last_result is not None and self._last_result is not self._reported:
            self.progress(self._last_result, force=True)
        deadline = time.monotonic() + flush_s
        while self._pending() and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.05)
        self._stop.set()
        self._kick()
        self._thread.join(10)

    # -- the background thread ------------------------------------------------------------------------
    def _pending(self) -> bool:
        with self._lock:
            return bool(self._pushes or self._events)

    def _kick(self) -> None:
        if self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._wake = asyncio.Event()
        bus = self._bus = await Bus.connect(self.url, name=f"learner-{self.learner}-{self.generation}", connect_timeout=3600)
        # Ordered consumers live in the server's memory: after a server restart nats-py re-creates them only
        # once two idle heartbeats are missed. At its default 5 s heartbeat every push meanwhile is based on
        # versions that age past max_base_lag and is refused, so listen for a 1 s heartbeat.
        ordered = dict(ordered_consumer=True, idle_heartbeat=1.0)
        subs = [await bus.js.subscribe(f"{GLOB_PREFIX}.{self.run_id}.*.key.*", **ordered,
                                       deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, headers_only=True, cb=self._on_global),
                await bus.js.subscribe(f"{GLOB_PREFIX}.{self.run_id}.*.d.*", **ordered,
                                       deliver_policy=DeliverPolicy.ALL, cb=self._on_global),
                await bus.js.subscribe(event_subject(self.run_id, "CheckpointMarkedFinal"), **ordered,
                                       deliver_policy=DeliverPolicy.ALL, cb=self._on_final)]
        self._ready.set()
        delay = 0.1
        while not self._stop.is_set() or self._pending():
            if not await self._send_one(bus):
                if self._stop.is_set() and not self._pending():
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), delay if self._pending() else 1.0)
                except asyncio.TimeoutError:
                    pass
                delay = min(delay * 2, 5.0) if self._pending() else 0.1
            else:
                delay = 0.1
        for sub in subs:
            await sub.unsubscribe()
        await bus.close()

    async def _send_one(self, bus: Bus) -> bool:
        """Publish the oldest queued item; True if something was published."""
        with self._lock:
            event = self._events[0] if self._events else None
            key, item = next(iter(self._pushes.items())) if self._pushes and event is None else (None, None)
        try:
            if event is not None:
                await bus.publish(event, retry_for=2)
                with self._lock:
                    self._events.popleft()
                return True
            if item is None:
                return False
            header, payload = item
            for h, chunk in split_chunks(header, payload):
                # The run belongs in the id: JetStream de-duplicates across the whole stream for 10 minutes,
                # and the next run on the same stack reuses the learner names.
                msg_id = f"{self.run_id}.{self.learner}.{self.generation}.{h.fragment}.{h.kind}.{h.local_step}.{h.chunk}"
                await bus.publish_raw(fragment_subject(self.run_id, h.fragment), chunk, msg_id=msg_id,
                                      headers=h.to_nats(), retry_for=2)
                self.bytes_sent += len(chunk)
            with self._lock:
                if self._pushes.get(key) is item:
                    del self._pushes[key]
            return True
        except ConnectionError as e:  # the server is away: keep training, try again with backoff
            log.info("learner %s: publish failed, will retry: %s", self.learner, e)
            return False

    async def _on_global(self, msg) -> None:
        headers = dict(msg.headers or {})
        try:
            header = FragmentHeader.from_nats(headers)
        except ValueError as e:
            log.warning("learner %s: ignoring a global message: %s", self.learner, e)
            return
        announced = "Nats-Msg-Size" in headers       # a headers-only delivery: the payload stays in the stream
        if announced:
            key = (header.fragment, header.version)
            for old in [k for k in self._keyseqs if k[0] == key[0] and k[1] < key[1]]:
                del self._keyseqs[old]
            self._keyseqs.setdefault(key, (header.num_chunks, {}))[1][header.chunk] = msg.metadata.sequence.stream
            self._maybe_fetch(key)
        with self._lock:
            self._inbox.append((header, None if announced else msg.data))

    def _want(self, key: tuple[int, int]) -> None:
        self._wanted.add(key)
        self._maybe_fetch(key)

    def _maybe_fetch(self, key: tuple[int, int]) -> None:
        num_chunks, seqs = self._keyseqs.get(key, (None, {}))
        if key in self._wanted and len(seqs) == num_chunks and self._bus is not None:
            self._wanted.discard(key)
            self._loop.create_task(self._fetch(key, dict(seqs)))

    async def _fetch(self, key: tuple[int, int], seqs: dict[int, int]) -> None:
        stream = stream_for(keyframe_subject(self.run_id, key[0])).name
        for chunk, seq in sorted(seqs.items()):
            for attempt in range(6):          # a server restart or a slow link: back off, then give up until the next keyframe
                try:
                    got = await self._bus.direct_get(stream, seq)
                    break
                except Exception as e:       # noqa: BLE001 -- timeouts and connection errors alike
                    log.info("learner %s: keyframe %s chunk %d not fetched (try %d): %s", self.learner, key, chunk, attempt + 1, e)
                    await asyncio.sleep(min(0.5 * 2 ** attempt, 8.0))
            else:
                return
            if got is None:                   # replaced by a newer keyframe, which is announced in turn
                return
            headers, data = got
            self.bytes_fetched += len(data)
            with self._lock:
                self._inbox.append((FragmentHeader.from_nats(headers), data))

    async def _on_final(self, msg) -> None:
        marked = parse(msg.data)
        with self._lock:
            self._final = dict(marked.versions)


def connect(*, nats_url: str, run_id: str, learner: str, generation: int) -> NatsTransport:
    return NatsTransport(nats_url, run_id=run_id, learner=learner, generation=generation)
