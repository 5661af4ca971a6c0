"""The least free memory of this machine's CUDA devices, for the launcher's memory fit of local CUDA islands.

torch.cuda.mem_get_info runs in a child process, so the launcher neither imports torch nor keeps a CUDA context
(hundreds of MB on every device) for its lifetime. Read only for a LaunchRun with a local CUDA island."""
from __future__ import annotations

import logging
import subprocess
import sys

log = logging.getLogger(__name__)
PROBE = ("import torch\n"
         "n = torch.cuda.device_count() if torch.cuda.is_available() else 0\n"
         "print(min(torch.cuda.mem_get_info(d)[0] for d in range(n)) if n else '')\n")


def cuda_free_gb(timeout_s: float = 120.0) -> float | None:
    """GB free on the fullest visible CUDA device; None when there is none or the probe fails (then not checked)."""
    try:
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=timeout_s, check=True)
        return int(out.stdout.strip()) / 1e9 if out.stdout.strip() else None
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        log.warning("this machine's CUDA memory could not be read (%s): local CUDA islands are not checked", e)
        return None
