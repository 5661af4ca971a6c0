"""The DiLoCo step boundary every learner backend shares: anchors, alpha-blend, streaming pushes, globals.

    sync = DilocoSync(arrays, config, run_id=..., learner=..., generation=...)
    hook = DilocoHook(sync, transport)   # learners/sync_hook.py: joining, step timing, progress, close
    hook.join()                          # before the first step
    each inner step:  hook.after_step(step, tokens) -> sync.step_boundary(step, tokens, transport, ...)

`arrays` is any ArrayAdapter (learners/torch/adapter.py is the torch one); the network is a Transport
(learners/transport/protocol.py) injected by the caller: learners/bus_client.py over NATS, in-process
wires in tests. Nothing here blocks: pushes are handed to the transport, incoming globals are queued and
applied, in version order, at the next step boundary. The anchor of a fragment is the broadcast shadow
itself: the exact values of its newest applied global version, bit-identical on every learner.
`after_step` is the same boundary with no transport (pushes returned as values).

Keyframes may arrive as announcements only (a header, no payload); which ones a learner fetches
(`Transport.fetch`) or adopts by checksum is learners/keyframe_demand.py.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from yeto.learners import kernels_warm
from yeto.learners.keyframe_demand import KeyframeDemand
from yeto.learners.layout import Layout, TensorSpec, plan_layout
from yeto.learners.transport.protocol import Transport
from yeto.schemas import codecs
from yeto.schemas.fragments import ChunkAssembler, FragmentError, FragmentHeader, apply_global, sha256
from yeto.schemas.recipe import SyncConfig

TakeBack = Callable[[int], tuple[FragmentHeader, bytes] | None]
"""A transport's `take_back`: the push of a fragment still queued, removed from its queue (learners/transport/protocol.py)."""


def none_waits(fragment: int) -> None:
    """The `take_back` of a caller that sends each push as it is made (`after_step` returns pushes as values)."""
    return None


FIRST_MERGE_AHEAD = 2
"""Pushes of one fragment a learner may have out, none answered, before the run's first merged round of it: at the next
step boundary it waits for that round (SyncConfig.first_merge_wait_s; learners/sync_hook.py)."""


class ArrayAdapter(Protocol):
    def names(self) -> list[str]: ...
    def shape(self, name: str) -> tuple[int, ...]: ...
    def dtype(self, name: str) -> str: ...
    def read(self, name: str) -> np.ndarray: ...      # f32; may be a live view, copied before the next step
    def write(self, name: str, value: np.ndarray) -> None: ...


@dataclass(frozen=True)
class Push:
    header: FragmentHeader          # message-level header; split_chunks adds the chunk fields
    payload: bytes


def interval(step: int, config: SyncConfig) -> int:
    """H after a push at inner step `step`: inner_steps, or on a ramp from inner_steps_start to inner_steps
    over the first inner_steps_ramp steps."""
    h, h0, ramp = config.inner_steps, config.inner_steps_start, config.inner_steps_ramp
    if not h0 or step >= ramp:
        return h
    return max(1, round(h0 + (h - h0) * step / ramp))


def push_steps(fragment: int, config: SyncConfig) -> Iterator[int]:
    """The inner steps at which fragment p is pushed, a pure function of the recipe (every learner, a resumed
    one included, pushes a fragment at the same steps): from offset p*H0/P (H0 if that is 0), then each
    interval later; without a ramp every H steps at offset p*H/P (streaming: about one fragment in flight)."""
    h0 = config.inner_steps_start or config.inner_steps
    return steps_from(fragment * h0 // config.num_fragments or h0, config)


def steps_from(step: int, config: SyncConfig) -> Iterator[int]:
    """`step`, then each interval later."""
    while True:
        yield step
        step += interval(step, config)


class DilocoSync:
    """One learner's side of the protocol: counters, anchors (= shadows), error feedback, the globals queue."""

    def __init__(self, arrays: ArrayAdapter, config: SyncConfig, *, run_id: str, learner: str, generation: int = 0,
                 keyframe_patience_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.arrays, self.config, self.run_id, self.learner, self.generation = arrays, config, run_id, learner, generation
        self.clock = clock
        specs = [TensorSpec(n, tuple(arrays.shape(n)), arrays.dtype(n)) for n in arrays.names()]
        self.layout: Layout = plan_layout(specs, config.num_fragments)
        self.active = self.layout.active
        self.anchors = {p: self._flat(p) for p in self.active}           # own initial values until a global lands
        self.versions: dict[int, int | None] = dict.fromkeys(self.active)
        self.c_tokens = dict.fromkeys(self.active, 0)
        self.c_steps = dict.fromkeys(self.active, 0)
        self.step, self.step_time_s, self.num_dropped, self.changed = 0, 0.0, 0, False
        self.total_tokens = 0                          # trained by this generation (a push's `tokens_to`)
        self.codec_up = codecs.codec(config.codec_up)
        self.feedback = (codecs.ErrorFeedback(self.codec_up, decay=config.feedback_decay)
                         if self.codec_up.error_feedback else None)
        self.assembler = ChunkAssembler(max_pending=4 * max(1, len(self.active)))
        self.queue: dict[int, dict[tuple[str, int], tuple[FragmentHeader, bytes]]] = {p: {} for p in self.active}
        self.pushed: dict[int, tuple[int, int]] = {}   # fragment -> (c_tokens, c_steps) its last push carried
        self.since: dict[int, tuple[int, int]] = {}    # fragment -> the counts its last push carried the progress after
        self.at_push: dict[int, np.ndarray] = {}       # fragment -> its values at that push (global_apply = rebase)
        self.unanswered: dict[int, np.ndarray] = {}    # fragment -> its values at a push no applied global answers yet
        self.in_flight: dict[int, int] = {}             # fragment -> its pushes since a global last landed
        self.pushed_at: dict[int, int] = {}            # fragment -> the inner step of its last push
        self._schedule = {p: push_steps(p, config) for p in self.active}
        self._next_push = {p: next(s) for p, s in self._schedule.items()}
        self.keyframes = KeyframeDemand(patience_s=keyframe_patience_s)
        self._own_sha: dict[int, str] = {}             # sha256 of the f32 initial values (while no global landed)
        self.acked_final = False                       # LearnerFinalAck sent for the run's final versions

    @property
    def fingerprint(self) -> str:
        return self.layout.fingerprint

    def init_pushes(self) -> list[Push]:
        """f32 version-0 candidates of fragments with no global yet (the syncer adopts the first)."""
        return [self._message(p, "init", codecs.F32, codecs.F32.encode(self.anchors[p]))
                for p in self.active if self.versions[p] is None]

    def ahead_of_first_merge(self) -> list[int]:
        """Fragments pushed twice or more, none answered, whose global is still version 0: the run has merged no
        round of them yet (a syncer still compiling its kernels on a fresh install: learners/sync_hook.py waits)."""
        return [p for p in self.active if self.versions[p] == 0 and self.in_flight.get(p, 0) >= FIRST_MERGE_AHEAD]

    def missing(self) -> list[int]:
        """Fragments with no global version and no keyframe announced (what a joining learner still waits for)."""
        return [p for p in self.active if self.versions[p] is None and p not in self.keyframes.announced]

    def offer(self, header: FragmentHeader, chunk: bytes | None) -> None:
        """Queue one chunk of a keyframe or delta (chunk None: a keyframe announced, payload not sent);
        applied at the next step boundary. Never raises on bad input."""
        if (header.kind not in ("keyframe", "delta") or header.fingerprint != self.fingerprint
                or header.fragment not in self.queue):
            return
        if chunk is None:
            self.keyframes.announce(header, self.clock())
            return
        try:
            payload = self.assembler.add(header, chunk)
        except FragmentError:
            self.num_dropped += 1        # a later keyframe repairs the gap
            return
        if payload is not None and header.numel == self.layout.numel(header.fragment):
            self.queue[header.fragment][(header.kind, header.version)] = (header, payload)

    def apply_globals(self) -> bool:
        """Adopt an announced version 0 equal to our own values, apply every queued global version; True if
        parameters changed. (Announced keyframes that must be downloaded are `keyframes_wanted`.)"""
        adopted = self.keyframes.adoptable(self.versions, self.layout.numel, self._own_sha256)
        for p in adopted:
            self.versions[p] = 0
        return any([self._apply(p, landed=p in adopted) for p in self.active])

    def keyframes_wanted(self) -> list[FragmentHeader]:
        """Announced keyframes to fetch now (each asked for once): no version yet, or stuck behind one."""
        return self.keyframes.wanted(self.versions, self.clock())

    def _own_sha256(self, p: int) -> str:
        if p not in self._own_sha:
            self._own_sha[p] = sha256(codecs.F32.encode(self.anchors[p]))
        return self._own_sha[p]

    def after_step(self, step: int, tokens: int, *, step_time_s: float | None = None,
                   take_back: TakeBack = none_waits) -> list[Push]:
        """The step boundary after inner step `step` as values: count, apply queued globals, return the pushes due
        (each with the progress of a push of its fragment that `take_back` returns: one its transport never sent)."""
        self.step = step
        if step_time_s is not None:
            ema = self.config.step_time_ema
            self.step_time_s = step_time_s if not self.step_time_s else ema * self.step_time_s + (1 - ema) * step_time_s
        self.total_tokens += tokens
        for p in self.active:
            self.c_tokens[p] += tokens
            self.c_steps[p] += 1
        self.changed = self.apply_globals()
        return [self._push(p, take_back) for p in self.active if self._due(p, step)]

    def _due(self, p: int, step: int) -> bool:
        while self._next_push[p] < step:                 # a resumed learner starts past the first push steps
            self._next_push[p] = next(self._schedule[p])
        if self._next_push[p] != step:
            return False
        self._next_push[p] = next(self._schedule[p])
        return True

    def step_boundary(self, step: int, tokens: int, transport: Transport, *, step_time_s: float | None = None) -> bool:
        """The step boundary after inner step `step`, through the transport: take the globals that arrived,
        apply them, hand over the pushes due, ask for keyframes, acknowledge the final versions once held;
        True if parameters changed."""
        self.receive(transport)
        send(transport, self.after_step(step, tokens, step_time_s=step_time_s, take_back=transport.take_back))
        self.request_keyframes(transport)
        self.ack_final(transport)
        return self.changed

    def receive(self, transport: Transport) -> None:
        """Queue the global chunks that arrived (applied by `apply_globals`)."""
        for header, chunk in transport.poll_globals():
            self.offer(header, chunk)

    def request_keyframes(self, transport: Transport) -> None:
        for header in self.keyframes_wanted():
            transport.fetch(header)

    def ack_final(self, transport: Transport) -> None:
        """Once the run's final versions are marked and applied here, acknowledge them (once): the finalizer
        then tears the island down at once instead of waiting out its acknowledgement timeout."""
        final = transport.final_versions()
        if self.acked_final or not final:
            return
        mine = {p: v for p, v in final.items() if p in self.versions}
        if all(self.versions[p] is not None and self.versions[p] >= v for p, v in mine.items()):
            self.acked_final = True
            transport.ack_final(mine)

    # -- internals ------------------------------------------------------------------------------------
    def _flat(self, p: int) -> np.ndarray:
        parts = [np.asarray(self.arrays.read(t.name), dtype=np.float32).reshape(-1) for t in self.layout.fragments[p]]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def final_pushes(self, take_back: TakeBack = none_waits) -> list[Push]:
        """At the end of training: push every fragment with progress not pushed yet (the last partial interval)."""
        return [self._push(p, take_back) for p in self.active if self.c_steps[p] > self.pushed.get(p, (0, 0))[1]]

    def _push(self, p: int, take_back: TakeBack = none_waits) -> Push:
        """The progress of fragment p not pushed yet: since the anchor, or, while an earlier push is unanswered (no
        newer global applied since it), since that push. The syncer merges every admitted push as a progress of
        its own, so a second push from the same anchor (a round trip longer than H steps, a syncer working off a
        backlog) must not carry the first one's progress again: it was merged once already, and the outer step
        would take it twice (three times, ... up to max_base_lag), which diverged runs whose syncer started late.
        That earlier push may still wait in the transport (a bus slower than H steps, a server away): then it is taken
        back and its progress (its payload as the syncer would decode it, with its counts) goes out in this one. The
        transport had dropped it for this one until 2026-12-06, and its progress never reached the syncer."""
        kernels_warm.wait()      # the codec kernels, made on a thread since the learner started (kernels_warm.py)
        waiting = take_back(p) if p in self.unanswered else None
        if waiting is not None:          # this push takes its place: the counts it started from, no more pushes out
            since = self.since[p]
        else:
            since = self.pushed.get(p, (0, 0)) if p in self.unanswered else (0, 0)
            self.in_flight[p] = self.in_flight.get(p, 0) + 1
        self.since[p] = since
        self.pushed[p] = (self.c_tokens[p], self.c_steps[p])
        self.pushed_at[p] = self.step
        values = self._flat(p)
        if self.config.global_apply == "rebase":
            self.at_push[p] = values
        d = values - self.unanswered.get(p, self.anchors[p])
        if waiting is not None:
            queued, queued_payload = waiting
            d += codecs.codec(queued.codec).decode(queued_payload, queued.numel)
        self.unanswered[p] = values
        payload = self.feedback.encode(p, d) if self.feedback else self.codec_up.encode(d)
        return self._message(p, "push", self.codec_up, payload, since=since)

    def _message(self, p: int, kind: str, codec: codecs.Codec, payload: bytes, since: tuple[int, int] = (0, 0)) -> Push:
        """A message of fragment p; a push counts the tokens and steps trained after `since` (the counts an
        unanswered earlier push carried). The header names no digest: the payload is named as it is split into chunks
        (schemas/fragments.py split_chunks, on every transport's way out), so it is not hashed here as well."""
        header = FragmentHeader(run_id=self.run_id, learner=self.learner, generation=self.generation, fragment=p, kind=kind,
                                role=self.layout.roles[p], base_version=self.versions[p] or 0, local_step=self.step,
                                c_steps=self.c_steps[p] - since[1], c_tokens=self.c_tokens[p] - since[0],
                                tokens_to=self.total_tokens, step_time_s=self.step_time_s, fingerprint=self.fingerprint,
                                codec=codec.name, numel=self.layout.numel(p))
        return Push(header, payload)

    def _apply(self, p: int, *, landed: bool = False) -> bool:
        kernels_warm.wait()
        queue, start = self.queue[p], None if landed else self.versions[p]
        # rebase with no push pending: relative to the global last applied (deltas update the anchor in place)
        before = (self.anchors[p].copy() if self.config.global_apply == "rebase" and p not in self.at_push
                  and (landed or (start is not None and queue)) else None)
        while True:
            v = self.versions[p]
            if v is not None and ("delta", v + 1) in queue:
                header, payload = queue.pop(("delta", v + 1))
            else:
                newer = [k for kind, k in queue if kind == "keyframe" and (v is None or k > v)]
                if not newer:
                    break
                header, payload = queue.pop(("keyframe", max(newer)))
            self.anchors[p] = apply_global(self.anchors[p] if v is not None else None, header, payload)
            self.versions[p] = header.version
        for key in [k for k in queue if self.versions[p] is not None and k[1] <= self.versions[p]]:
            del queue[key]
        if self.versions[p] == start:
            return False
        if landed and self.versions[p] == 0:
            # Version 0 adopted by checksum is our own initial values, and no global answered a push of ours: nothing
            # to blend in. A learner that trained before it came (its watches late) pushed that progress against these
            # very values; blending them in pulled it halfway back to them and dropped its unanswered pushes, so its
            # next push carried the loss back to the run.
            self.keyframes.landed(p, 0)
            return False
        # A first global that came as a keyframe payload replaces the learner's values outright: they are
        # the base model (a replacement, a late joiner), and blending them in would pull the run back
        # towards its starting point. (Version 0 adopted by checksum with newer versions after it: a landing.)
        base = start is None and not landed
        if self.config.push_schedule == "global" and p in self.unanswered and not landed:
            self._realign(p)
        self._after_apply(p, alpha=0.0 if base else None, reference=None if base else self.at_push.get(p, before))
        return True

    def _realign(self, p: int) -> None:
        """push_schedule = global: a global answered our push of p and landed now, at about the moment it lands on
        every learner; push p next H - min(lag, cap) steps from here. A learner that waited `lag` <= cap steps for
        the answer keeps its H; one that ran ahead of the others (its push waited in the syncer for theirs) moves
        its next push back by the difference, so the fragment's next pushes leave together."""
        lag = self.step - self.pushed_at.get(p, self.step)
        h = interval(self.step, self.config)
        nxt = self.step + max(1, h - min(lag, max(1, h // 12)))
        self._schedule[p] = steps_from(nxt, self.config)
        self._next_push[p] = next(self._schedule[p])

    def _after_apply(self, p: int, *, alpha: float | None = None, reference: np.ndarray | None = None) -> None:
        """A newer global version of fragment p landed: blend it in (or rebase onto it, from `reference`) and keep
        the counts of the progress not pushed yet."""
        self.keyframes.landed(p, self.versions[p])
        self._blend(p, self.config.alpha if alpha is None else alpha, reference)
        self.at_push.pop(p, None)
        self.unanswered.pop(p, None)
        self.in_flight.pop(p, None)
        # The counts a push carried are now in the global; what was trained since that push is not and
        # still belongs to the next push (zeroing here lost it from the merge weight and from goodput).
        tokens, steps = self.pushed.pop(p, (0, 0))
        self.c_tokens[p] = max(0, self.c_tokens[p] - tokens)
        self.c_steps[p] = max(0, self.c_steps[p] - steps)

    def _blend(self, p: int, alpha: float, reference: np.ndarray | None = None) -> None:
        """theta <- alpha*theta + (1-alpha)*global, or with a `reference` (rebase: the values the global replaces)
        theta <- theta + (1-alpha)*(global - reference): what was trained since the reference is kept."""
        offset, shadow = 0, self.anchors[p]
        for t in self.layout.fragments[p]:
            global_part = shadow[offset:offset + t.numel].reshape(t.shape)
            ref = None if reference is None else reference[offset:offset + t.numel].reshape(t.shape)
            offset += t.numel
            local = np.asarray(self.arrays.read(t.name), dtype=np.float32)
            if ref is not None:
                value = local + (1 - alpha) * (global_part - ref)
            else:
                value = global_part.copy() if alpha == 0 else alpha * local + (1 - alpha) * global_part
            self.arrays.write(t.name, value.astype(np.float32, copy=False))



def send(transport: Transport, pushes: list[Push]) -> None:
    for push in pushes:
        transport.send_push(push.header, push.payload)
