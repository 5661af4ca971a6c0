"""The finalizer's I/O: verify the final keyframes are in the keyframe stream; the artifact, by its writer process."""
from __future__ import annotations

from pathlib import Path

from yeto.infra.bus import Bus
from yeto.infra.runner import Context, Retry
from yeto.schemas.base import Message
from yeto.schemas.final import BuildArtifact, CheckpointMarkedFinal, MarkFinal
from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.subjects import keyframe_subject
from yeto.services.finalizer.logic import SOURCE
from yeto.services.finalizer.writer import Writer, WriterError


async def keyframe_versions(bus: Bus, run_id: str, fragments: list[int]) -> dict[int, int | None]:
    """The version of each fragment's latest keyframe in the keyframe stream (None: none there)."""
    out: dict[int, int | None] = {}
    for frag in fragments:
        found = await bus.last(keyframe_subject(run_id, frag, 0))
        out[frag] = None if found is None else FragmentHeader.from_nats(found[0]).version
    return out


class Effects:
    def __init__(self, state_dir: Path, nats_url: str | None = None):
        self.state_dir = Path(state_dir)
        self.writer = Writer(nats_url, self.state_dir)

    async def act(self, cmd, ctx: Context) -> list[Message]:
        if isinstance(cmd, MarkFinal):
            return [await self.mark_final(cmd, ctx)]
        if isinstance(cmd, BuildArtifact):
            return [await self.build(cmd, ctx)]
        raise AssertionError(f"unknown finalizer intent {cmd!r}")

    async def mark_final(self, cmd: MarkFinal, ctx: Context) -> Message:
        found = await keyframe_versions(ctx.bus, cmd.run_id, sorted(cmd.versions))
        behind = {f: (have, v) for f, v in cmd.versions.items() if (have := found[f]) is None or have < v}
        if behind:
            raise Retry(f"final keyframes not durable yet (fragment: (in stream, final)) {behind}", delay_s=1.0)
        return cmd.caused(CheckpointMarkedFinal, versions=cmd.versions, snapshot_path=cmd.snapshot_path,
                          sha256=cmd.sha256, source=SOURCE)

    async def build(self, cmd: BuildArtifact, ctx: Context) -> Message:
        """The artifact, written by the finalizer's writer process (writer.py: the finalizer's loop, with its budget
        tick, never waits on the writer's libraries)."""
        try:
            return await self.writer.write(cmd)
        except WriterError as e:
            if e.retry_s is not None:
                raise Retry(str(e), delay_s=e.retry_s) from e
            raise
