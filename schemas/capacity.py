"""How big a fleet may be: islands, nodes and GPUs per node capped, local learner processes by this machine's CPUs/GPUs.

Pure: the caller passes what the machine has. `yeto launch` checks a fleet before anything starts, and the launcher
checks it again before it spawns anything (a LaunchRun over the cap is rejected with the reason).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_ISLANDS = 64          # default cap of islands in one run (the launcher: $YETO_MAX_ISLANDS; the CLI: --max-islands)
MAX_NODES = 64            # nodes of one cloud island
MAX_GPUS_PER_NODE = 16    # accelerators of one node (the largest offerings have 8)


@dataclass(frozen=True)
class Capacity:
    cpus: int
    """CPUs of the machine local islands run on (os.cpu_count())."""
    gpus: int
    """CUDA devices there (torch.cuda.device_count(); 0 without torch or CUDA)."""
    max_islands: int = MAX_ISLANDS
    npus: int = 0
    """Ascend NPUs there (infra/accelerators.py; 0 without the Ascend driver)."""


def _n(entry: dict[str, Any], key: str) -> int:
    value = entry.get(key, 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def over_capacity(fleet: list[dict[str, Any]], cap: Capacity, flag: str = "--max-islands") -> str | None:
    """Why this fleet is too big, saying what to change; None when it fits."""
    if len(fleet) > cap.max_islands:
        return f"{len(fleet)} islands is more than the cap of {cap.max_islands}; use fewer islands or raise {flag}"
    for i, e in enumerate(fleet):
        if e.get("cloud") != "local" and _n(e, "nodes") > MAX_NODES:
            return f"island {i} has {_n(e, 'nodes')} nodes, more than {MAX_NODES}; split it into several islands"
        if e.get("cloud") != "local" and _n(e, "count") > MAX_GPUS_PER_NODE:
            return f"island {i} asks for {_n(e, 'count')} GPUs per node, more than {MAX_GPUS_PER_NODE}; use nodes (N x count)"
    local = [e for e in fleet if e.get("cloud") == "local"]
    cpu = sum(_n(e, "count") for e in local if e.get("gpu") not in ("cuda", "npu"))
    npu = sum(_n(e, "count") for e in local if e.get("gpu") == "npu")
    cuda = sum(_n(e, "count") for e in local if e.get("gpu") == "cuda")
    if cpu > cap.cpus:
        return (f"the local islands would run {cpu} CPU learner processes and this machine has {cap.cpus} CPUs; "
                f"use at most {cap.cpus} in total (e.g. --gpu {','.join(['local:1xcpu'] * min(cap.cpus, 2))})")
    if cuda > cap.gpus:
        return (f"the local islands would use {cuda} CUDA devices and this machine has {cap.gpus}; "
                f"use at most {cap.gpus} in total" + ("" if cap.gpus else ", or cpu islands (local:1xcpu)"))
    if npu > cap.npus:
        return (f"the local islands would use {npu} Ascend NPUs and this machine has {cap.npus} (the Ascend driver's "
                f"/dev/davinci* devices, narrowed by ASCEND_RT_VISIBLE_DEVICES); use at most {cap.npus} in total"
                + ("" if cap.npus else ", or cpu islands (local:1xcpu)"))
    return None
