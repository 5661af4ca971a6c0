"""Read a run's global model back from the keyframe stream: the finalizer's view of the syncer's f32 state.

The learners' `LayoutDeclared` event says which tensor sits where; the latest keyframe of every
fragment (YETO_GKEY, one message per chunk) holds its values. No file is shared with the syncer.
"""
from __future__ import annotations

import numpy as np

from yeto.infra.bus import Bus
from yeto.schemas import codecs, parse
from yeto.schemas.fragments import ChunkAssembler, FragmentHeader
from yeto.schemas.layout import LayoutDeclared
from yeto.schemas.subjects import keyframe_subject, learner_event_subject


class StateNotReady(RuntimeError):
    """The layout or a keyframe is not in the streams (yet)."""


async def read_layout(bus: Bus, run_id: str) -> LayoutDeclared:
    found = await bus.last(learner_event_subject(run_id, "LayoutDeclared"))   # any learner's: they declare one layout
    if found is None:
        raise StateNotReady(f"run {run_id} has no LayoutDeclared event: no learner has connected")
    layout = parse(found[1])
    if not isinstance(layout, LayoutDeclared):
        raise StateNotReady(f"run {run_id}: a {layout.type} on the LayoutDeclared subject")
    return layout


async def read_keyframe(bus: Bus, run_id: str, fragment: int) -> tuple[FragmentHeader, np.ndarray]:
    assembler, chunk = ChunkAssembler(), 0
    while True:
        found = await bus.last(keyframe_subject(run_id, fragment, chunk))
        if found is None:
            raise StateNotReady(f"run {run_id} has no keyframe chunk {chunk} of fragment {fragment}")
        headers, data = found
        header = FragmentHeader.from_nats(headers)
        payload = assembler.add(header, data)
        if payload is not None:
            return header, codecs.codec(header.codec).decode(payload, header.numel)
        chunk += 1


async def read_final_state(bus: Bus, run_id: str) -> dict[str, np.ndarray]:
    """Every trainable tensor of the run by name, as f32 arrays, from the latest keyframes."""
    layout = await read_layout(bus, run_id)
    out: dict[str, np.ndarray] = {}
    for p in range(layout.num_fragments):
        tensors = [t for t in layout.tensors if t.fragment == p]
        if not tensors:
            continue
        header, flat = await read_keyframe(bus, run_id, p)
        if header.fingerprint != layout.fingerprint:
            raise StateNotReady(f"keyframe of fragment {p} has fingerprint {header.fingerprint[:12]}, "
                                f"the layout {layout.fingerprint[:12]}")
        offset = 0
        for t in tensors:
            n = int(np.prod(t.shape)) if t.shape else 1
            out[t.name] = flat[offset:offset + n].reshape(t.shape)
            offset += n
        assert offset == flat.size, f"fragment {p}: layout holds {offset} values, the keyframe {flat.size}"
    return out
