"""A run's learner log lines copied from its log stream (YETO_LOG) into `<state>/runs/<run>/logs/<learner>.log`.

For a cloud run's copy-back: the head and its stream go with the VM, the lines stay on the laptop, where `yeto logs`
reads them as it reads a local run's files. Each copy rewrites the files from the stream's first line of the run,
so a second pull leaves no line twice.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TextIO

from yeto.infra.bus import Bus
from yeto.infra.run_paths import run_path
from yeto.schemas.subjects import log_subject

LEARNER = re.compile(r"[A-Za-z0-9_-]{1,64}")   # a file name: anything else in a subject is not a learner of Yeto's


async def save_run_logs(bus: Bus, state_dir: Path, run_id: str) -> int:
    """Write the run's log lines, one file per learner; how many lines were written."""
    consumer = await bus.consumer([log_subject(run_id)], ack=False)
    files: dict[str, TextIO] = {}
    num_lines = 0
    try:
        pending = await consumer.num_pending()
        while pending:
            page = await consumer.fetch(256, 5.0)
            if not page:
                break
            for d in page:
                learner = d.subject.split(".", 3)[3]
                if not LEARNER.fullmatch(learner):
                    continue
                if learner not in files:
                    path = run_path(state_dir, run_id, "logs", f"{learner}.log")
                    path.parent.mkdir(parents=True, exist_ok=True)
                    files[learner] = open(path, "w", encoding="utf-8")
                text = d.data.decode("utf-8", "replace")
                files[learner].write(text + "\n")
                num_lines += text.count("\n") + 1
            pending = page[-1].num_pending
    finally:
        for f in files.values():
            f.close()
        await consumer.close()
    return num_lines
