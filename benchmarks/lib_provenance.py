"""Where a benchmark result came from: the commit (and whether the tree was dirty), the command, the machine.

Every benchmark that writes a result JSON puts this beside its numbers, under one key:

    from lib_provenance import provenance
    result["provenance"] = provenance()          # once per JSON, at the time it is written

A frozen copy (scripts/frozen.sh) is a git worktree of its commit, so a run from one records that commit. Nothing
here reads the environment's secrets: the command is `sys.argv` as given (benchmarks take no secret on their command
line), the machine is what `platform`, /proc and the installed packages say.
"""
from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _git(*argv: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def commit() -> dict:
    """The checkout's commit and whether tracked files differ from it (`dirty`; None where git cannot say)."""
    head = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": head, "dirty": None if status is None else bool(status)}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _gpus() -> list[str]:
    """GPU names: from torch when this process already imported it, else nvidia-smi where there is one."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return []
        return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []
    return []


def machine() -> dict:
    """Hostname, CPU model, core count, RAM, Python and torch versions, GPUs (empty list: none seen)."""
    return {"hostname": socket.gethostname(), "cpu_model": _cpu_model(), "cpu_count": os.cpu_count(),
            "ram_bytes": _ram_bytes(), "python": platform.python_version(), "torch": _version("torch"),
            "platform": platform.platform(), "gpus": _gpus()}


def provenance(argv: list[str] | None = None) -> dict:
    """`{"commit", "dirty", "argv", "machine"}` for a result JSON. `argv`: the command as run, default this process's
    (the interpreter, the script, its arguments); a benchmark whose main() was called with arguments passes
    `[script, *those]`."""
    return {**commit(), "argv": [sys.executable, *sys.argv] if argv is None else list(argv), "machine": machine()}
