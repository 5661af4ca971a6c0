"""How big a fleet may be: islands, nodes and GPUs per node capped, local learner processes by this machine's CPUs/GPUs.

Local CPU learner processes are capped at the CPUs, or at CPU_OVERSUBSCRIBE a CPU when the launch says
--oversubscribe-cpus (a small machine running a tiny model's island of several ranks: slower, not wrong).

Pure: the caller passes what the machine has. `yeto launch` checks a fleet before anything starts, and the launcher
checks it again before it spawns anything (a LaunchRun over the cap is rejected with the reason).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_ISLANDS = 64          # default cap of islands in one run (the launcher: $YETO_MAX_ISLANDS; the CLI: --max-islands)
MAX_NODES = 64            # nodes of one cloud island
MAX_GPUS_PER_NODE = 16    # accelerators of one node (the largest offerings have 8)
CPU_OVERSUBSCRIBE = 2     # with --oversubscribe-cpus: local CPU learner processes per CPU, at most
"""Two processes a core take turns: each step is slower, the training is the same (a learner's result does not
depend on how fast it runs). More than two a core is refused even then: every process holds its own copy of the
model and of torch's runtime, and the collectives of an island wait on its slowest rank."""


@dataclass(frozen=True)
class Capacity:
    cpus: int
    """CPUs of the machine local islands run on (os.cpu_count())."""
    gpus: int
    """CUDA devices there (torch.cuda.device_count(); 0 without torch or CUDA)."""
    max_islands: int = MAX_ISLANDS
    npus: int = 0
    """Ascend NPUs there (infra/accelerators.py; 0 without the Ascend driver)."""
    oversubscribe: bool = False
    """`yeto launch --oversubscribe-cpus`: up to CPU_OVERSUBSCRIBE local CPU learner processes per CPU."""


def oversubscribed(recipe: dict[str, Any]) -> bool:
    """Whether a launch recipe (its wire dict) asked for --oversubscribe-cpus."""
    return recipe.get("oversubscribe_cpus") is True


def _n(entry: dict[str, Any], key: str) -> int:
    value = entry.get(key, 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def cpu_processes(fleet: list[dict[str, Any]]) -> int:
    """The local CPU learner processes of a fleet (one per rank of each local CPU island)."""
    return sum(_n(e, "count") for e in fleet if e.get("cloud") == "local" and e.get("gpu") not in ("cuda", "npu"))


def _over_cpus(cpu: int, cap: Capacity) -> str | None:
    if cpu <= cap.cpus or (cap.oversubscribe and cpu <= CPU_OVERSUBSCRIBE * cap.cpus):
        return None
    why = (f"the local islands would run {cpu} CPU learner processes and this machine has {cap.cpus} CPUs; use at most "
           f"{cap.cpus} in total (e.g. --gpu {','.join(['local:1xcpu'] * min(cap.cpus, 2))})")
    if cpu > CPU_OVERSUBSCRIBE * cap.cpus:
        return f"{why}; --oversubscribe-cpus allows at most {CPU_OVERSUBSCRIBE} a CPU ({CPU_OVERSUBSCRIBE * cap.cpus})"
    return f"{why}, or add --oversubscribe-cpus (up to {CPU_OVERSUBSCRIBE} a CPU: each step slower, the same training)"


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
    npu = sum(_n(e, "count") for e in local if e.get("gpu") == "npu")
    cuda = sum(_n(e, "count") for e in local if e.get("gpu") == "cuda")
    if why := _over_cpus(cpu_processes(fleet), cap):
        return why
    if cuda > cap.gpus:
        return (f"the local islands would use {cuda} CUDA devices and this machine has {cap.gpus}; "
                f"use at most {cap.gpus} in total" + ("" if cap.gpus else ", or cpu islands (local:1xcpu)"))
    if npu > cap.npus:
        return (f"the local islands would use {npu} Ascend NPUs and this machine has {cap.npus} (the Ascend driver's "
                f"/dev/davinci* devices, narrowed by ASCEND_RT_VISIBLE_DEVICES); use at most {cap.npus} in total"
                + ("" if cap.npus else ", or cpu islands (local:1xcpu)"))
    return None
