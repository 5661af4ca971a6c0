"""The finalizer's I/O: verify the final keyframes are in the keyframe stream, build and deliver the artifact."""
from __future__ import annotations

import asyncio
from pathlib import Path

from yeto.infra import signing
from yeto.infra.bus import Bus
from yeto.infra.run_paths import run_path
from yeto.infra.runner import Context, Retry
from yeto.schemas.base import Message
from yeto.schemas.final import ArtifactWritten, BuildArtifact, CheckpointMarkedFinal, MarkFinal
from yeto.schemas.fragments import FragmentHeader
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.subjects import keyframe_subject
from yeto.services.finalizer.artifact import write_artifact
from yeto.services.finalizer.logic import SOURCE
from yeto.services.finalizer.output import deliver


async def keyframe_versions(bus: Bus, run_id: str, fragments: list[int]) -> dict[int, int | None]:
    """The version of each fragment's latest keyframe in the keyframe stream (None: none there)."""
    out: dict[int, int | None] = {}
    for frag in fragments:
        found = await bus.last(keyframe_subject(run_id, frag, 0))
        out[frag] = None if found is None else FragmentHeader.from_nats(found[0]).version
    return out


class Effects:
    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)

    def artifact_dir(self, run_id: str) -> Path:
        return run_path(self.state_dir, run_id, "artifact")

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
        try:
            from yeto.infra.globals_reader import read_final_state
        except ImportError as e:
            raise Retry(f"no reader of the final state: {e}", delay_s=30) from e
        state = await read_final_state(ctx.bus, cmd.run_id)
        out = self.artifact_dir(cmd.run_id)
        key = signing.stack_key(self.state_dir)     # the stack's own: `yeto verify` names who signed
        summary = {"fleet": cmd.fleet, "rounds_merged": cmd.rounds_merged, "learner_steps": cmd.learner_steps,
                   "learner_losses": cmd.learner_losses, "learner_eval_losses": cmd.learner_eval_losses}
        kind, files, manifest_sha = await asyncio.to_thread(
            write_artifact, state, recipe=cmd.recipe, out=out, run_id=cmd.run_id, versions=cmd.versions, acked=cmd.acked,
            snapshot_dir=run_path(self.state_dir, cmd.run_id, area="syncer"), run=summary, key=key)
        where, uploaded = await asyncio.to_thread(deliver, out, LaunchRecipe.upcast(cmd.recipe).output)
        return cmd.caused(ArtifactWritten, output=where, local_path=str(out), artifact_kind=kind, files=files,
                          manifest_sha256=manifest_sha, uploaded=uploaded, signer_public_key=signing.public_hex(key),
                          source=SOURCE)
