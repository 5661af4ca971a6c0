"""Fragment messages the data plane cannot take now or ever: nak'ed a bounded number of times while the event
they wait for may lag (RunLaunched, IslandUp), terminated with a LearnerRejected when no syncer will take them."""
from __future__ import annotations

import logging
import time
from collections import OrderedDict

from yeto.infra.bus import Bus, Delivery
from yeto.schemas.base import derive_id
from yeto.schemas.subjects import learner_of_fragment, run_of_fragment
from yeto.schemas.training import LearnerRejected

log = logging.getLogger(__name__)
UNKNOWN_RUN_NAKS, UNKNOWN_RUN_DELAY_S = 30, 2.0     # a minute for a lagging event to arrive
MAX_TRACKED = 10_000                                # messages whose naks are counted at once (oldest forgotten)


class Refusals:
    def __init__(self, instance: str) -> None:
        self.instance = instance
        self.naks: OrderedDict[int, int] = OrderedDict()    # stream seq -> naks so far
        # stream seq -> (subject, when) of a message nak'ed for a retry whose redelivery has not come: JetStream
        # counts it neither as pending nor as delivered-and-taken, so the final cut's drain asks here (`awaited`), and
        # a later message on its subject waits behind it (`behind`, by subject: it is asked of every message taken in)
        self.waiting: dict[int, tuple[str, float]] = {}
        self.on_subject: dict[str, set[int]] = {}

    async def retry(self, msg: Delivery) -> bool:
        """Nak a message that waits for an event, UNKNOWN_RUN_NAKS times at most; False once it has waited enough."""
        naks = self.naks.pop(msg.seq, 0) + 1
        if naks > UNKNOWN_RUN_NAKS:
            return False
        self.naks[msg.seq] = naks
        while len(self.naks) > MAX_TRACKED:
            self.naks.popitem(last=False)
        await msg.nak(delay_s=UNKNOWN_RUN_DELAY_S)
        if naks == 1:
            log.info("fragment message %d on %r waits for the event it needs (nak'ed, again in %gs)", msg.seq,
                     msg.subject[:200], UNKNOWN_RUN_DELAY_S)
        self._drop(msg.seq)
        self.waiting[msg.seq] = (msg.subject, time.monotonic())
        self.on_subject.setdefault(msg.subject, set()).add(msg.seq)
        while len(self.waiting) > MAX_TRACKED:
            self._drop(next(iter(self.waiting)))
        return True

    def _drop(self, seq: int) -> None:
        if (found := self.waiting.pop(seq, None)) is not None:
            seqs = self.on_subject[found[0]]
            seqs.discard(seq)
            if not seqs:
                del self.on_subject[found[0]]

    def redelivered(self, seq: int) -> None:
        """A message came (again): no longer awaited."""
        self._drop(seq)

    def _forget_lost(self) -> None:
        """Forget messages not back within three delays: they went to another instance or the server dropped them."""
        horizon = time.monotonic() - 3 * UNKNOWN_RUN_DELAY_S
        for seq, (_, at) in list(self.waiting.items()):
            if at < horizon:
                self._drop(seq)

    def awaited(self, run_id: str) -> bool:
        """Whether a message of `run_id` nak'ed for a retry is still to come back."""
        self._forget_lost()
        return any(run_of_fragment(subject) == run_id for subject, _ in self.waiting.values())

    def behind(self, msg: Delivery) -> bool:
        """Whether an earlier message on `msg`'s subject (one learner's pushes of one fragment) waits for its retry.
        A learner's push carries only the progress since its previous one, and the ledger takes each push once, in
        order: taken before the earlier one comes back, this one would make the earlier a duplicate, its progress
        lost. So it waits too, and comes back after it."""
        horizon = time.monotonic() - 3 * UNKNOWN_RUN_DELAY_S      # one older is lost (_forget_lost)
        return any(seq < msg.seq and self.waiting[seq][1] >= horizon for seq in self.on_subject.get(msg.subject, ()))

    async def refuse(self, bus: Bus, msg: Delivery, run_id: str, reason: str, detail: str) -> None:
        """Terminate a message that no syncer will take, with a LearnerRejected saying why."""
        try:
            event = LearnerRejected(id=derive_id(self.instance, msg.seq, reason), run_id=run_id, source=self.instance,
                                    learner=learner_of_fragment(msg.subject) or "?", fragment=-1, reason=reason, detail=detail)
        except ValueError as e:             # a run id no event may carry: the message goes all the same
            log.warning("fragment message %d on %r terminated (%s): %s", msg.seq, msg.subject[:200], reason, e)
        else:
            await bus.publish(event)
        await msg.term()
