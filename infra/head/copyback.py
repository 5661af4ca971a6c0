"""A cloud run's copy-back to the laptop (`yeto pull`): its events replayed from the head's YETO_EVT into the
laptop's copy of the tape, its artifact fetched and verified, then RunCopiedBack (the CLI reads the copy through
yeto/cli/common.run_source once the head is gone).

The copy is made with the tape writer's own code (infra/tape/copy.py: the same rows, keyed by the head's stream
sequences), never a copy of the head's DuckDB file, so it resumes where it stopped: a second pull appends only
what came after its last sequence. The artifact comes over the bus from the head's supervisor
(infra/head/artifact_files.py). Once RunCopiedBack is on the bus the supervisor stops the head.
"""
from __future__ import annotations

from pathlib import Path

from yeto.infra.bus.nats_bus import NatsBus, redact
from yeto.infra.head import artifact_files
from yeto.infra.head import records as heads
from yeto.infra.log_copy import save_run_logs
from yeto.infra.run_paths import run_path
from yeto.infra.signing import SIG_FILE
from yeto.infra.tape.copy import copy_tape
from yeto.schemas.base import derive_id
from yeto.schemas.final import RunCopiedBack, end_of_run


async def copy_back(state_dir: Path, run_id: str, url: str) -> RunCopiedBack:
    """Copy the ended run's tape and (when it lives only on the head) its artifact to this state dir, then say so.
    ValueError while the run has not ended (what was copied stays, and the next pull resumes it)."""
    db = heads.copied_tape(state_dir, run_id)
    db.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    bus = await NatsBus.connect(url, name="yeto-pull")
    try:
        copied = await copy_tape(bus, run_id, db)
        if copied.rows == 0:
            raise ValueError(f"the stack at {redact(url)} has no events of run {run_id}")
        if end_of_run(copied.ends) is None:
            raise ValueError(f"run {run_id} has not ended yet (no RunFinalized with its artifact, RunStopped or "
                             f"RunFailed): `yeto pull` copies a run once it is over; `yeto status {run_id}` follows it")
        await save_run_logs(bus, state_dir, run_id)     # the learners' log lines: the log stream goes with the head
        written, manifest, folder = copied.written, None, run_path(state_dir, run_id, "artifact")
        if written and not written.get("uploaded"):     # on the head's disk only: it goes with the VM
            manifest = await artifact_files.fetch(bus, run_id, folder, written["manifest_sha256"])
        msg = RunCopiedBack(id=derive_id(run_id, "RunCopiedBack", copied.last_seq), run_id=run_id, source="cli",
                            tape_rows=copied.rows, last_seq=copied.last_seq,
                            # the files, the manifest and its signature when the artifact has one
                            num_files=len(manifest["files"]) + 1 + (folder / SIG_FILE).exists() if manifest else 0,
                            manifest_sha256=written["manifest_sha256"] if manifest and written else "")
        await bus.publish(msg)
        try:
            await copy_tape(bus, run_id, db, while_answered=True)   # RunCopiedBack on the copy too: when it was made
        except Exception:  # noqa: BLE001 - the head stops its stack once RunCopiedBack is in: it may be gone already
            pass
    finally:
        await bus.close()
    if heads.head_record(state_dir, run_id):
        heads.update_head(state_dir, run_id, state="copied")
    return msg

