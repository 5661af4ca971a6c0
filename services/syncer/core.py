"""The syncer's engine without I/O: fragment chunks in; events, broadcast messages and snapshots out.

    core = SyncerCore(config, run_id=...)            # fingerprint adopted from the first learner if None
    outputs = core.receive(header, chunk, now)        # one NATS message of the fragment stream
    outputs = core.tick(now)                          # when a WakeAt comes due
An output is an Event to publish, a Publish (a global keyframe/delta to chunk and send), a SaveSnapshot
(write it before the Publish that follows it) or a WakeAt. The clock for merge timing is injected.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from yeto.schemas import codecs
from yeto.schemas.base import Event, derive_id
from yeto.schemas.fragments import ChunkAssembler, FragmentError, FragmentHeader
from yeto.schemas.recipe import SyncConfig
from yeto.schemas.training import GlobalVersionPublished, LearnerJoined, LearnerRejected, RoundAborted, RoundMerged
from yeto.services.syncer import backend, gram, merge, resume
from yeto.services.syncer.admission import LearnerRecord, admit, note_admitted
from yeto.services.syncer.broadcast import BroadcastShadow
from yeto.services.syncer.logic import MergeNow, Round, WakeAt, decide
from yeto.services.syncer.snapshot import FragmentSnapshot


@dataclass(frozen=True)
class Publish:
    header: FragmentHeader
    payload: bytes


@dataclass(frozen=True)
class SaveSnapshot:
    snapshot: FragmentSnapshot


class SyncerCore:
    """Admission, rounds, merges and the broadcast shadow for the fragments this instance owns."""

    def __init__(self, config: SyncConfig, *, run_id: str, fingerprint: str | None = None, fragments: Iterable[int] | None = None,
                 clock: Callable[[], float] = time.perf_counter, source: str = "syncer") -> None:
        self.config, self.run_id, self.fingerprint, self.clock, self.source = config, run_id, fingerprint, clock, source
        self.owned = None if fragments is None else frozenset(fragments)
        self.assembler = ChunkAssembler()
        self.learners: dict[str, LearnerRecord] = {}
        self.rounds: dict[int, Round] = {}
        self.frags: dict[int, merge.FragmentRows] = {}
        self.grams: dict[int, gram.RoundGram] = {}
        self.roles: dict[int, str] = {}
        self.init_sha: dict[int, str] = {}
        self.since_snapshot: dict[int, int] = {}
        self.broadcast: BroadcastShadow | None = None

    # -- inputs ---------------------------------------------------------------------------------------
    def receive(self, h: FragmentHeader, chunk: bytes, now: float) -> list:
        if h.kind not in ("push", "init"):
            return []
        if self.owned is not None and h.fragment not in self.owned:   # one event per message, not per chunk
            return [self._reject(h, "not_owned", f"fragment {h.fragment} belongs to another syncer instance")] if h.chunk == 0 else []
        try:
            payload = self.assembler.add(h, chunk)
        except FragmentError as e:
            return [self._reject(h, e.reason, e.detail)]
        if payload is None:
            return []
        if self.fingerprint is None:
            self.fingerprint = h.fingerprint
        return self._init(h, payload, now) if h.kind == "init" else self._push(h, payload, now)

    def tick(self, now: float) -> list:
        out: list = []
        for p in sorted(self.rounds):
            out += self._decide(p, now)
        return out

    # -- pushes ---------------------------------------------------------------------------------------
    def _push(self, h: FragmentHeader, payload: bytes, now: float) -> list:
        if h.fragment not in self.frags:
            return [self._reject(h, "bad_header", f"fragment {h.fragment} has no version 0 yet; the learner sends its init first")]
        r, frag, record = self.rounds[h.fragment], self.frags[h.fragment], self.learners.get(h.learner)
        rejection = admit(h, fingerprint=self.fingerprint, version=r.version, numel=frag.numel, record=record, config=self.config)
        if rejection is not None:
            return [self._reject(h, rejection.reason, rejection.detail)]
        k = len(r.pending)
        row = frag.push(k)                              # a free row: a superseded push stays intact until this one checks out
        # This push's row of G, off the merge's critical path: on the CPU taken as it is decoded (no second read).
        acc = gram.RowProducts(frag.rows[2:2 + k + 1], row)
        if backend.GPU:
            row.set(codecs.decode(h.codec, payload, h.numel))
            acc(0, row.size)
        else:
            codecs.decode(h.codec, payload, h.numel, out=row, on_chunk=acc)
        products = acc.products
        if not np.isfinite(products[k]):
            return [self._reject(h, "non_finite", f"push of fragment {h.fragment} at step {h.local_step} holds NaN or infinity")]
        out = self._note_learner(h, record, now)
        old = r.pending.get(h.learner)
        if old is not None:
            frag.push(old.slot)[:] = row
        self.grams.setdefault(h.fragment, gram.RoundGram()).admit(r.add(h, now).slot, products)
        return out + self._decide(h.fragment, now)

    def _init(self, h: FragmentHeader, payload: bytes, now: float) -> list:
        p = h.fragment
        if h.fingerprint != self.fingerprint:
            return [self._reject(h, "fingerprint", f"layout fingerprint {h.fingerprint[:12]}... differs from the run's {self.fingerprint[:12]}...")]
        out = self._note_learner(h, self.learners.get(h.learner), now, admitted=False)
        if p in self.frags:
            if self.init_sha.get(p, h.sha256) != h.sha256:
                out.append(self._reject(h, "init_mismatch", f"initial values of fragment {p} differ from the adopted version 0; "
                                        "the learner will be overwritten by the keyframe (check seeds and dtypes)"))
            return out
        values = codecs.decode(h.codec, payload, h.numel)
        self.frags[p], self.roles[p], self.init_sha[p] = merge.FragmentRows(values), h.role, h.sha256
        self.rounds[p] = Round(p)
        return out + self._publish(p, now)

    def _note_learner(self, h: FragmentHeader, record: LearnerRecord | None, now: float, admitted: bool = True) -> list:
        fresh = record is None or h.generation > record.generation
        record = note_admitted(h, record) if admitted else (LearnerRecord(generation=h.generation) if fresh else record)
        record.last_seen = now
        record.step_time_s = h.step_time_s or record.step_time_s
        self.learners[h.learner] = record
        if not fresh:
            return []
        return [LearnerJoined(id=derive_id(self.run_id, "LearnerJoined", h.learner, h.generation), run_id=self.run_id,
                              source=self.source, learner=h.learner, generation=h.generation, fingerprint=h.fingerprint)]

    # -- rounds ---------------------------------------------------------------------------------------
    def live(self, now: float) -> set[str]:
        return {name for name, rec in self.learners.items() if now - rec.last_seen <= self.config.learner_timeout_s}

    def _decide(self, p: int, now: float) -> list:
        live = self.live(now)
        slowest = max((self.learners[name].step_time_s for name in live), default=0.0)
        intent = decide(self.rounds[p], live=live, slowest_step_s=slowest, now=now, config=self.config)
        if isinstance(intent, MergeNow):
            return self._merge(intent, now)
        return [intent] if isinstance(intent, WakeAt) else []

    def _merge(self, m: MergeNow, now: float) -> list:
        p, cfg = m.fragment, self.config
        r, frag = self.rounds[p], self.frags[p]
        hs = [push.header for push in m.pushes]
        lags = [r.version - h.base_version for h in hs]
        weights = merge.push_weights([h.c_tokens for h in hs], [h.c_steps for h in hs], lags,
                                     weighting=cfg.weighting, staleness_discount=cfg.staleness_discount)
        if not weights.sum() > 0:                       # no token counts at all: equal weights
            weights = np.ones(len(hs))
        mode = "avg" if self.roles[p] == "embed" else cfg.merge
        started = self.clock()
        g = self.grams[p].take(len(hs))                 # every push of the round was admitted through _push
        result = merge.merge_round(frag, len(hs), weights, merge=mode, lr=cfg.outer_lr, momentum=cfg.momentum, g=g)
        backend.synchronize()
        elapsed = self.clock() - started
        r.close(merged=result is not None, sync_s=elapsed)
        learners = [h.learner for h in hs]
        if result is None:
            return [RoundAborted(id=derive_id(self.run_id, "RoundAborted", p, r.version, *learners), run_id=self.run_id,
                                 source=self.source, fragment=p, global_version=r.version, responders=learners,
                                 reason="the merged result is not finite; the fragment keeps its version")]
        credits = [self.learners[h.learner].credit(h) for h in hs]
        for h, credit in zip(hs, credits):
            self.learners[h.learner].tokens_merged += credit
        event = RoundMerged(id=derive_id(self.run_id, "RoundMerged", p, r.version), run_id=self.run_id, source=self.source,
                            fragment=p, global_version=r.version, responders=learners,
                            weights=[float(w) for w in weights / weights.sum()], staleness=lags,
                            tokens=sum(credits), grace_ms=m.grace_ms, quorum_ms=m.quorum_ms,
                            merge_ms=1e3 * elapsed, delta_norm=result.delta_norm, merge=result.merge)
        return [event] + self._publish(p, now)

    def _publish(self, p: int, now: float) -> list:
        version = self.rounds[p].version
        messages = self.ensure_broadcast().publish(p, version, backend.to_host(self.frags[p].theta), self.roles[p])
        out: list = []
        self.since_snapshot[p] = self.since_snapshot.get(p, 0) + 1
        if version == 0 or self.since_snapshot[p] >= self.config.snapshot_every:
            self.since_snapshot[p] = 0
            out.append(SaveSnapshot(self.snapshot(p)))  # durable before learners can see the version
        out += [Publish(h, payload) for h, payload in messages]
        out.append(GlobalVersionPublished(id=derive_id(self.run_id, "GlobalVersionPublished", p, version), run_id=self.run_id,
                                          source=self.source, fragment=p, global_version=version,
                                          keyframe=any(h.kind == "keyframe" for h, _ in messages),
                                          num_bytes=sum(len(payload) for _, payload in messages)))
        return out

    # -- final cut ------------------------------------------------------------------------------------
    def final_cut(self, now: float) -> list:
        """Merge whatever pushes are in, quorum or not: the run's last round of every fragment."""
        out: list = []
        for p in sorted(self.rounds):
            r = self.rounds[p]
            if r.pending:
                out += self._merge(MergeNow(fragment=p, pushes=tuple(r.pending.values()), grace_ms=0.0, quorum_ms=0.0), now)
        return out

    def exact_keyframe(self, p: int) -> tuple[FragmentHeader, bytes]:
        """An f32 keyframe of Θ itself (not the q4-tracked shadow): the authoritative final values."""
        broadcast = self.ensure_broadcast()
        broadcast.restore(p, self.rounds[p].version, backend.to_host(self.frags[p].theta))
        return broadcast.keyframe(p, self.roles[p])

    # -- snapshots (services/syncer/resume.py) -------------------------------------------------------
    def snapshot(self, p: int) -> FragmentSnapshot:
        return resume.snapshot_of(self, p)

    def restore(self, snaps: dict[int, FragmentSnapshot], now: float) -> None:
        """Resume from snapshots; learners in the ledgers count as live until they time out."""
        resume.restore(self, snaps, now)

    def ensure_broadcast(self) -> BroadcastShadow:
        if self.broadcast is None:
            self.broadcast = BroadcastShadow(run_id=self.run_id, fingerprint=self.fingerprint,
                                             keyframe_every=self.config.keyframe_every, codec_down=self.config.codec_down)
        return self.broadcast

    def _reject(self, h: FragmentHeader, reason: str, detail: str) -> LearnerRejected:
        return LearnerRejected(id=derive_id(self.run_id, "LearnerRejected", h.learner, h.generation, h.fragment, h.kind,
                                            h.local_step, h.chunk, reason), run_id=self.run_id, source=self.source,
                               learner=h.learner, generation=h.generation, fragment=h.fragment, reason=reason, detail=detail)
