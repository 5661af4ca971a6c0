"""A chunk's way in: admission's first stage before anything is kept, then reassembly under pending-byte caps.

The stage (admission/header.py) checks the header against the owner, subject, tape and layout; the caps are sized
from the run's fragments (docs/PROTOCOL.md, validation)."""
from __future__ import annotations

from dataclasses import dataclass, field

from yeto.schemas import codecs
from yeto.schemas.fragments import DEFAULT_MAX_BYTES, ChunkAssembler, FragmentError, FragmentHeader
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer import admission
from yeto.services.syncer.admission import Rejection
from yeto.services.syncer.roster import Roster


@dataclass
class Taken:
    """What one chunk came to: the whole payload once its message is complete, refusals (of it, or of partial
    messages evicted to make room: one event per message), and why it was refused (None: it was kept)."""

    payload: bytes | None = None
    rejections: list[tuple[FragmentHeader, Rejection]] = field(default_factory=list)
    refused: str | None = None


class Intake:
    def __init__(self, run_id: str, owned: frozenset[int] | None) -> None:
        self.run_id, self.owned = run_id, owned
        self.assembler = ChunkAssembler()

    def take(self, h: FragmentHeader, chunk: bytes, *, sender: str | None, tape: Roster | None, config: SyncConfig,
             fingerprint: str | None, numels: dict[int, int]) -> Taken:
        """`numels`: values per fragment with a version 0; `sender`: the subject's learner (None: not checked)."""
        refusal = admission.chunk(h, run_id=self.run_id, sender=sender, owned=self.owned, roster=tape,
                                  fingerprint=fingerprint, numel=numels.get(h.fragment))
        if refusal is not None:                       # one event per message, on its chunk 0; nothing was kept
            sent = h if sender in (None, h.learner) else h.model_copy(update={"learner": sender})   # the subject's, not the claim
            return Taken(rejections=[(sent, refusal)] if h.chunk == 0 else [], refused=refusal.reason)
        self._size(config, numels, tape)
        taken = Taken()
        try:
            taken.payload = self.assembler.add(h, chunk)
        except FragmentError as e:
            taken.rejections.append((h, admission.assembly(e)))
            taken.refused = e.reason
        taken.rejections[:0] = [(old, admission.evicted(old)) for old in self.assembler.evicted]
        self.assembler.evicted.clear()
        return taken

    def _size(self, config: SyncConfig, numels: dict[int, int], tape: Roster | None) -> None:
        """Per sender 2 f32 copies of the largest fragment; in all, one such per announced learner (at least 2),
        or SyncConfig.max_pending_bytes; 16 GiB while no fragment has a version 0 (sizes are not known yet)."""
        largest = max((codecs.F32.encoded_size(n) for n in numels.values()), default=0)
        learners = len(tape.generations) if tape is not None else 1
        self.assembler.max_sender_bytes = 2 * largest if largest else DEFAULT_MAX_BYTES
        total = self.assembler.max_sender_bytes * max(2, learners) if largest else DEFAULT_MAX_BYTES
        self.assembler.max_pending_bytes = config.max_pending_bytes or total
