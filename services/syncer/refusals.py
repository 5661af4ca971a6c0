"""Fragment messages the data plane cannot take now or ever: nak'ed a bounded number of times while the event
they wait for may lag (RunLaunched, IslandUp), terminated with a LearnerRejected when no syncer will take them."""
from __future__ import annotations

import logging
from collections import OrderedDict

from yeto.infra.bus import Bus, Delivery
from yeto.schemas.base import derive_id
from yeto.schemas.subjects import learner_of_fragment
from yeto.schemas.training import LearnerRejected

log = logging.getLogger(__name__)
UNKNOWN_RUN_NAKS, UNKNOWN_RUN_DELAY_S = 30, 2.0     # a minute for a lagging event to arrive
MAX_TRACKED = 10_000                                # messages whose naks are counted at once (oldest forgotten)


class Refusals:
    def __init__(self, instance: str) -> None:
        self.instance = instance
        self.naks: OrderedDict[int, int] = OrderedDict()    # stream seq -> naks so far

    async def retry(self, msg: Delivery) -> bool:
        """Nak a message that waits for an event, UNKNOWN_RUN_NAKS times at most; False once it has waited enough."""
        naks = self.naks.pop(msg.seq, 0) + 1
        if naks > UNKNOWN_RUN_NAKS:
            return False
        self.naks[msg.seq] = naks
        while len(self.naks) > MAX_TRACKED:
            self.naks.popitem(last=False)
        await msg.nak(delay_s=UNKNOWN_RUN_DELAY_S)
        return True

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
