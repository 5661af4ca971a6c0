"""Projection snapshots: a service's folded state with the YETO_EVT position it is folded to, kept as the one
message on `yeto.snap.<service>` (YETO_SNAP keeps one per subject), so a start folds only what came after.

Every instance of a service folds the same events with the same pure `evolve`, so the state at a position is
the same whichever instance wrote it: one snapshot per service. A snapshot that does not load (another codec
version, bytes the codec refuses, a position the event stream no longer holds) is logged and ignored: the
service folds from sequence 1, as `yeto tape replay` always does.
"""
from __future__ import annotations

import asyncio
import logging

from yeto.infra.runner.spec import Context
from yeto.schemas.subjects import EVT_STREAM, MAX_PAYLOAD, snapshot_subject

log = logging.getLogger(__name__)
CODEC_VERSION, POSITION = "Yeto-State-Codec", "Yeto-Stream-Seq"


class Snapshots:
    def __init__(self, ctx: Context):
        self.ctx, self.codec = ctx, ctx.spec.codec
        self.subject = snapshot_subject(ctx.spec.name)
        self.saved = 0                   # the position of the latest snapshot stored (or loaded)
        self.unsaved = 0                 # events folded since
        self.since: float | None = None  # loop time of the first of them

    async def restore(self) -> None:
        """Load the latest snapshot into ctx.state and ctx.position, if there is one that loads."""
        ctx = self.ctx
        if self.codec is None or (found := await ctx.bus.last(self.subject)) is None:
            return
        headers, data = found
        try:
            if headers.get(CODEC_VERSION) != self.codec.version:
                raise ValueError(f"codec version {headers.get(CODEC_VERSION)!r}, this service's is {self.codec.version!r}")
            position = int(headers[POSITION])
            if position and await ctx.bus.direct_get(EVT_STREAM, position) is None:
                raise ValueError(f"event {position} is not in {EVT_STREAM}: the stream is not the one it was folded from")
            state = self.codec.load(data)
        except Exception as e:  # noqa: BLE001 - any snapshot that does not load means: fold from the start
            log.warning("%s: snapshot ignored (%s); folding %s from sequence 1", ctx.spec.name, e, EVT_STREAM)
            return
        ctx.state, ctx.position, self.saved = state, position, position
        log.info("%s: resumed from the snapshot at %s seq %d", ctx.spec.name, EVT_STREAM, position)

    def folded(self) -> None:
        self.unsaved += 1
        if self.since is None:
            self.since = asyncio.get_running_loop().time()

    async def maybe_save(self) -> None:
        spec = self.ctx.spec
        if self.codec and self.since is not None and (self.unsaved >= spec.snapshot_every or
                                                      asyncio.get_running_loop().time() - self.since >= spec.snapshot_s):
            await self.save()

    async def save(self) -> None:
        """Store the state at ctx.position; a failure only costs a longer fold at the next start."""
        ctx = self.ctx
        position = ctx.position
        if self.codec is None or position <= self.saved:
            return
        try:
            data = self.codec.dump(ctx.state)
            if len(data) > MAX_PAYLOAD - 64 * 1024:   # headers and protocol overhead ride on top
                raise ValueError(f"{len(data)} bytes, over the bus's message limit")
            await ctx.bus.publish_raw(self.subject, data, headers={CODEC_VERSION: self.codec.version, POSITION: str(position)},
                                      retry_for=5)
        except Exception as e:  # noqa: BLE001 - the service goes on; the previous snapshot stays valid
            log.warning("%s: no snapshot at seq %d: %r", ctx.spec.name, position, e)
            return
        self.saved, self.unsaved, self.since = position, 0, None
