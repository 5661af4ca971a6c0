"""Admission: the one place that decides whether a learner's message is taken (docs/PROTOCOL.md, admission).

Each stage is a pure function of a header and the syncer's state that returns the first refusal that applies, or
None; the syncer calls them in this order, and no other module under services/syncer refuses a message:
 1. chunk      before any chunk is kept (intake.py): the header's kind, the fragment owned here, its identity (run and
               learner against the subject, generation announced in the roster), its layout (fingerprint, version 0,
               numel); then the ChunkAssembler's own refusals (`assembly`: sizes, checksums) and `evicted` partials
 2. push       a reassembled push (core.py `_push`): fingerprint, generation, numel, duplicate, base-version lag, tokens
    init       a reassembled init instead: its fingerprint; then, once noted, its values against version 0 (`same_init`)
 3. bounded    an admitted push's c_steps and c_tokens clipped to what the recipe allows (its weight and credit)
 4. decoded    after decoding (fragment.py `take_in`): NaN or infinity, then the norm bound
Before stage 1 the data plane terms a message with an unparsable header, or of a run with no RunLaunched (`unknown_run`):
it has no run to be admitted to.
"""
from __future__ import annotations

from yeto.services.syncer.admission.header import assembly, chunk, evicted
from yeto.services.syncer.admission.payload import bounded, decoded, init, push, same_init
from yeto.services.syncer.admission.rejection import Rejection

__all__ = ["Rejection", "assembly", "bounded", "chunk", "decoded", "evicted", "init", "push", "same_init"]
