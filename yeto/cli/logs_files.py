"""The launcher's local log files of a run: `<state>/runs/<run>/logs/island-<N>.log` (one file per rank may add a
suffix: `island-<N>.rank<R>.log`), printed from their tail and, when following, as they grow."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from yeto.infra.run_paths import run_path


def log_files(state_dir: Path, run: str, island: int | None) -> list[Path]:
    files = sorted(run_path(state_dir, run, "logs").glob("*.log"))
    if island is not None:
        files = [f for f in files if f.name.startswith(f"island-{island}.")]
    return files


def follow_logs(files: Callable[[], list[Path]], out: TextIO, *, lines: int, follow: bool,
                stop: Callable[[], bool] = lambda: False, interval: float = 0.5) -> None:
    """Print the last `lines` of each file; with `follow`, then whatever they (or new files) append until stop()."""
    offsets: dict[Path, int] = {}
    first = True
    while True:
        current = files()
        for f in current:
            with open(f, "rb") as fh:
                fh.seek(offsets.get(f, 0))
                data = fh.read()
            end = data.rfind(b"\n") + 1 if follow else len(data)  # a half-written line waits for its end
            offsets[f] = offsets.get(f, 0) + end
            chunk = data[:end]
            if first:
                chunk = b"".join(chunk.splitlines(keepends=True)[-lines:]) if lines else b""
            prefix = f"[{f.stem}] " if len(current) > 1 else ""
            for line in chunk.decode("utf-8", "replace").splitlines():
                out.write(prefix + line + "\n")
        out.flush()
        first = False
        if not follow or stop():
            return
        time.sleep(interval)
