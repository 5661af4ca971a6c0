"""The syncer's engine without I/O: fragment chunks in; events, broadcasts, snapshots and wake-ups out.

One push, from the learner to the broadcast, one file per step:
 1. learners/diloco_sync.py         step_boundary: d = θ − anchor of a fragment that is due, q4 with error feedback
 2. learners/transport/outbox.py    the newest push per fragment, chunked (schemas/fragments.py) onto YETO_FRAG
 3. services/syncer/dataplane.py    fetches each chunk and hands it to SyncerCore.receive (this file, `_push`)
 4. services/syncer/intake.py       admission's first stage before any chunk is kept: kind, owner, sender = the
                                    subject's learner, a generation the roster announced (roster.py), layout; then
                                    reassembly under pending-byte caps
    services/syncer/admission/      the one place that admits or refuses, stage by stage (its docstring states the
                                    order): `chunk` above; `push`: fingerprint, generation, numel, duplicate, base
                                    version lag, tokens; `bounded`: steps and tokens clipped; `decoded` below
 5. services/syncer/fragment.py     take_in: decode (schemas/codecs/) into a row, its Gram row on the way (gram.py);
                                    then admission's `decoded`: finite, and a norm within its bound
 6. services/syncer/rounds.py       the push joins the round; decide: quorum of the live (liveness.py), grace (grace.py)
                                    -> MergeNow or WakeAt
 7. services/syncer/merge.py        weights, avg/RDA from G, the fused Nesterov outer step (FragmentState.merge)
 8. services/syncer/broadcast.py    the new version as a delta against the shadow, and keyframes (FragmentState.publish)
 9. services/syncer/outputs.py      perform, in order: the broadcast's chunks, the events (bus_sink.py), then the
                                    snapshot if due, in the background (durable.py); learners apply the globals in
                                    diloco_sync.py

    core = SyncerCore(config, run_id=...)            # fingerprint adopted from the first learner if None
    outputs = core.receive(header, chunk, now, sender=...)  # one NATS message of the fragment stream; `core.refused`
    outputs = core.tick(now)                          # when a WakeAt comes due
    outputs = core.follow(roster, now)                # the launcher's newest word: who is announced, who is gone
The clock for merge timing is injected; the learner ledger (ledger.py) is the only state across fragments. Who
counts as live (liveness.py) is looked at on every message and `follow`: when a learner drops out, every round
that waited on it is decided again at once.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from yeto.schemas import codecs
from yeto.schemas.fragments import ChunkAssembler, FragmentHeader
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer import admission, liveness, reports
from yeto.services.syncer.fragment import FragmentState
from yeto.services.syncer.intake import Intake
from yeto.services.syncer.ledger import Ledger
from yeto.services.syncer.outputs import Broadcast, SaveSnapshot
from yeto.services.syncer.roster import Roster
from yeto.services.syncer.rounds import MergeNow, WakeAt, decide
from yeto.services.syncer.snapshot import FragmentSnapshot


class SyncerCore:
    """The learner ledger, the fragments this instance owns, and the routing of each message between them."""

    def __init__(self, config: SyncConfig, *, run_id: str, fingerprint: str | None = None, fragments: Iterable[int] | None = None,
                 clock: Callable[[], float] = time.perf_counter, source: str = "syncer", roster: Roster | None = None) -> None:
        self.config, self.run_id, self.fingerprint, self.clock = config, run_id, fingerprint, clock
        self.owned = None if fragments is None else frozenset(fragments)
        self.roster = roster            # None admits any learner: for tests of the merge math only; the service sets it
        self.intake = Intake(run_id, self.owned)
        self.learners = Ledger()
        self.fragments: dict[int, FragmentState] = {}
        self.report = reports.Reports(run_id, source)
        self.refused: str | None = None  # why the last chunk received was refused (None: taken; the data plane terms it)
        self._live: set[str] = set()     # who counted as live when last looked at
        self._started: float | None = None   # when the run's first chunk was taken here: learners join until a while after
        self._num_owned = sum(1 for p in range(config.num_fragments) if self.owned is None or p in self.owned)

    def receive(self, h: FragmentHeader, chunk: bytes, now: float, *, sender: str | None = None) -> list:
        """One chunk; `sender` is the learner of the subject it came on (None: not checked)."""
        taken = self.intake.take(h, chunk, sender=sender, tape=self.roster, config=self.config, fingerprint=self.fingerprint,
                                 numels={p: f.numel for p, f in self.fragments.items()})
        self.refused = taken.refused
        out = [self.report.rejected(old, why) for old, why in taken.rejections]
        if taken.refused is None:        # not a heartbeat: only an admitted message is (ledger.py `note`)
            self._started = now if self._started is None else self._started
        if taken.payload is not None:
            self.fingerprint = self.fingerprint or h.fingerprint
            out += self._init(h, taken.payload, now) if h.kind == "init" else self._push(h, taken.payload, now)
        return out + self._recheck(now)

    def follow(self, tape: Roster, now: float) -> list:
        """The launcher's newest announcements (runs.py's fold); rounds that waited on a learner gone are decided."""
        self.roster = tape
        return self._recheck(now)

    @property
    def assembler(self) -> ChunkAssembler:
        return self.intake.assembler

    def tick(self, now: float) -> list:
        return [out for p in sorted(self.fragments) for out in self._decide(self.fragments[p], now)]

    def live(self, now: float) -> set[str]:
        return liveness.live(self.learners, now=now, gone=self.roster.gone if self.roster else {}, config=self.config,
                             num_owned=self._num_owned, announced=self.roster.generations if self.roster else {},
                             started=self._started)

    def joining(self, now: float) -> set[str]:
        """Announced first-generation learners with no push yet, while the run's start is recent (liveness.py)."""
        return liveness.joining(self.learners, self.roster.generations if self.roster else {},
                                gone=self.roster.gone if self.roster else {}, now=now, started=self._started, config=self.config)

    def _recheck(self, now: float) -> list:
        """Every round decided again when a learner stopped counting as live since the last look (a round may
        have been waiting for its push): quorum is a majority of those live now."""
        live, before = self.live(now), self._live
        self._live = live
        return self.tick(now) if before - live else []

    def _push(self, h: FragmentHeader, payload: bytes, now: float) -> list:
        frag = self.fragments[h.fragment]
        rejection = admission.push(h, fingerprint=self.fingerprint, version=frag.version, numel=frag.numel,
                                   record=self.learners.get(h.learner), roster=self.roster, config=self.config)
        if rejection is not None:
            repair = frag.repair(h.base_version) if rejection.reason == "stale_base" else []
            return self._refuse(h, rejection) + [Broadcast(*m) for m in repair]
        h = admission.bounded(h, version=frag.version, roster=self.roster, config=self.config)   # its weight and credit
        products = frag.take_in(h, payload)
        rejection = admission.decoded(h, sq_norm=float(products[-1]), theta_norm=frag.theta_norm().value(), config=self.config)
        if rejection is not None:
            return self._refuse(h, rejection)
        out = [self.report.joined(h)] if self.learners.note(h, now, admitted=True) else []
        frag.add(h, now, products)
        return out + self._decide(frag, now)

    def _refuse(self, h: FragmentHeader, rejection: admission.Rejection) -> list:
        self.refused = rejection.reason
        return [self.report.rejected(h, rejection)]

    def _decide(self, frag: FragmentState, now: float) -> list:
        live = self.live(now)
        slowest = self.learners.slowest_step_s(live)
        intent = decide(frag.round, live=live, slowest_step_s=slowest, now=now, config=self.config)
        if isinstance(intent, MergeNow):
            return self._merge(frag, intent)
        if intent is None and frag.round.pending and self.joining(now):      # decided again when the joining ends
            intent = WakeAt(frag.fragment, liveness.join_deadline(self._started, self.config))
        return [intent] if isinstance(intent, WakeAt) else []

    def _merge(self, frag: FragmentState, m: MergeNow) -> list:
        headers = [push.header for push in m.pushes]
        combo, weights, lags, seconds = frag.merge(headers, self.config, self.clock)
        if combo is None:
            return [self.report.aborted(frag.fragment, frag.version, headers)]
        credits = self.learners.credit(headers)
        merged = self.report.merged(frag.fragment, frag.version, headers, weights, lags, credits, m, seconds, combo)
        return self._publish(frag, merged)

    def _publish(self, frag: FragmentState, *events) -> list:
        """The version's broadcast, then its events (what the tape says went out did), then its snapshot."""
        messages, snapshot_due = frag.publish(self.config.snapshot_every)
        out = [Broadcast(h, payload) for h, payload in messages]
        if out:                            # Θ's norm for the next round's pushes, begun once the chunks are out
            out[-1] = Broadcast(out[-1].header, out[-1].payload, then=frag.norm_later())
        out += [*events, self.report.published(frag.fragment, frag.version, messages)]
        if not snapshot_due:
            return out
        if frag.version == 0:              # nothing older to leap from: durable before learners see it
            return [SaveSnapshot(self.snapshot(frag.fragment))] + out
        return out + [SaveSnapshot(self.snapshot(frag.fragment), background=True)]     # off the critical path

    def _init(self, h: FragmentHeader, payload: bytes, now: float) -> list:
        frag = self.fragments.get(h.fragment)
        rejection = admission.init(h, fingerprint=self.fingerprint)
        if rejection is None and frag is not None:
            rejection = admission.same_init(h, init_sha=frag.init_sha)
        if rejection is not None:          # a refusal is no heartbeat: the ledger hears only admitted messages
            return self._refuse(h, rejection)
        out = [self.report.joined(h)] if self.learners.note(h, now, admitted=False) else []
        if frag is None:                   # the first init of a fragment is its version 0
            values = codecs.codec(h.codec).decode(payload, h.numel)
            frag = self.fragments[h.fragment] = FragmentState.adopt(h, values, self.run_id, self.config)
            return out + self._publish(frag)
        return out

    def final_cut(self) -> list:
        """Merge whatever pushes are in, quorum or not: the run's last round of every fragment."""
        out: list = []
        for p, frag in sorted(self.fragments.items()):
            if frag.round.pending:
                out += self._merge(frag, MergeNow(p, tuple(frag.round.pending.values()), grace_ms=0.0, quorum_ms=0.0))
        return out

    def snapshot(self, p: int) -> FragmentSnapshot:
        return self.fragments[p].snapshot(self.learners.entries(p))

    def restore(self, snaps: dict[int, FragmentSnapshot], now: float, published: dict[int, int] | None = None) -> list:
        """Resume from snapshots; learners in their ledgers count as live (last seen `now`) until they time out.
        `published`: the newest version of each fragment that went out (the global streams' last chunk 0). A
        round's snapshot is written after its broadcast, so the predecessor may have published versions the
        snapshot lacks, and learners hold them: the restored values then take a version past all of them (a
        leap), so no version number ever names two different values and no learner is left ahead of the syncer.
        Returns, for each fragment, a keyframe of the restored version to send before anything else (learners
        behind it or beside it take it; they download only when stuck, the others see a header) and its
        FragmentRestored event."""
        out: list = []
        self._started = -math.inf          # the run started before this instance: nobody is still joining
        for p, s in sorted(snaps.items()):
            self.fingerprint = self.fingerprint or s.fingerprint
            if s.fingerprint != self.fingerprint:
                raise ValueError(f"snapshot of fragment {p} has another layout fingerprint: another run's, or another layout's")
            went_out = max((published or {}).get(p, s.version), s.version)
            version = s.version if went_out == s.version else went_out + 1
            self.fragments[p] = FragmentState.restored(s, self.run_id, self.config, version=version)
            self.learners.restore(p, s.ledger, now)
            out += [Broadcast(*self.fragments[p].shadow.keyframe()), self.report.restored(p, s.version, went_out, version)]
        return out
