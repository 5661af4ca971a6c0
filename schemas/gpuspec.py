"""The `--gpu` grammar: `cloud:[nodes x]<count>x<gpu>[@region]`, one comma-separated entry per learner island.

Examples: `aws:8xa100@us-east-2`, `runpod:8xh100@CA`, `gcp:2x8xh100` (two 8-GPU nodes form one island),
`local:1xcpu`, `local:2xcuda`, `local:8xnpu` (Ascend; `local:8xascend910b` is the same island). GPU names are
SkyPilot's accelerator names, matched case-insensitively. No SkyPilot cloud rents Ascend NPUs: a cloud Ascend entry
is refused with where Ascend islands can run instead (docs/ASCEND.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Clouds SkyPilot's catalog knows (all are in sky's ALL_CLOUDS), plus `local` for processes on this machine.
KNOWN_CLOUDS = ("aws", "gcp", "azure", "lambda", "runpod", "oci", "paperspace", "fluidstack",
                "cudo", "vast", "nebius", "kubernetes", "local")
# SkyPilot accelerator names (canonical spelling); `local` islands take `cpu` or `cuda` instead.
KNOWN_GPUS = ("B200", "H200", "H100", "H100-MEGA", "GH200", "A100-80GB", "A100", "L40S", "L40", "L4",
              "A10G", "A10", "A6000", "A5000", "A4000", "RTX4090", "RTX3090", "V100", "V100-32GB", "T4",
              "MI300X", "MI250X")
LOCAL_DEVICES = ("cpu", "cuda", "npu")
# An Ascend training NPU named by its model on a local island is the `npu` device (the learner reads its generation).
_ASCEND = re.compile(r"(npu|ascend\w*)")
NO_CLOUD_ASCEND = ("no cloud SkyPilot knows rents Ascend NPUs (the SkyPilot Yeto installs, 0.8-0.9: its catalogs list "
                   "NVIDIA and AMD GPUs and TPUs, and its Kubernetes support schedules nvidia.com/gpu and google.com/tpu "
                   "only); run an Ascend island on the NPU host as local:<count>xnpu, or join it to a cloud run with "
                   "`yeto join --device npu`")

_ENTRY = re.compile(r"^(?P<cloud>[a-z]+):(?:(?P<nodes>\d+)x)?(?P<count>\d+)x(?P<gpu>[A-Za-z0-9-]+)"
                    r"(?:@(?P<region>[A-Za-z0-9_.-]+))?$")
_CANONICAL = {g.lower(): g for g in KNOWN_GPUS}


@dataclass(frozen=True)
class IslandSpec:
    """One learner island: `nodes` machines of `count` accelerators each, in one cloud (and region)."""

    cloud: str
    gpu: str
    count: int
    nodes: int = 1
    region: str | None = None

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.count

    def to_dict(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "gpu": self.gpu, "count": self.count, "nodes": self.nodes, "region": self.region}


def _bad(entry: str, why: str) -> ValueError:
    return ValueError(
        f"--gpu entry {entry!r}: {why}. Write cloud:[nodes x]<count>x<gpu>[@region], e.g. aws:8xa100@us-east-2 "
        f"or local:1xcpu. Known clouds: {', '.join(KNOWN_CLOUDS)}. Known GPUs: {', '.join(KNOWN_GPUS)} "
        f"(local islands: {', '.join(LOCAL_DEVICES)}).")


def _parse_entry(entry: str) -> IslandSpec:
    m = _ENTRY.match(entry)
    if not m:
        raise _bad(entry, "does not match the grammar")
    cloud = m["cloud"]
    if cloud not in KNOWN_CLOUDS:
        raise _bad(entry, f"unknown cloud {cloud!r}" + (f" ({NO_CLOUD_ASCEND})" if cloud.startswith("huawei") else ""))
    count, nodes = int(m["count"]), int(m["nodes"] or 1)
    if count < 1 or nodes < 1:
        raise _bad(entry, "counts must be at least 1")
    name = m["gpu"].lower()
    if cloud != "local" and _ASCEND.fullmatch(name):
        raise _bad(entry, NO_CLOUD_ASCEND)
    if cloud == "local":
        if name.startswith("ascend") and not name.startswith("ascend910"):
            raise _bad(entry, f"{m['gpu']!r} is not an Ascend training NPU (Ascend 910-class NPUs train; 310 cards serve)")
        name = "npu" if _ASCEND.fullmatch(name) else name
        if name not in LOCAL_DEVICES:
            raise _bad(entry, f"a local island runs on 'cpu', 'cuda' or 'npu', not {m['gpu']!r}")
        if m["region"] or nodes != 1:
            raise _bad(entry, "a local island has no region and exactly one node")
        return IslandSpec(cloud="local", gpu=name, count=count)
    if name not in _CANONICAL:
        raise _bad(entry, f"unknown GPU {m['gpu']!r}")
    return IslandSpec(cloud=cloud, gpu=_CANONICAL[name], count=count, nodes=nodes, region=m["region"])


def parse_gpu(text: str) -> list[IslandSpec]:
    """Parse a whole `--gpu` value into one IslandSpec per island; ValueError names the bad entry."""
    entries = [e.strip() for e in text.split(",")]
    if not text.strip() or any(not e for e in entries):
        raise _bad(text, "empty entry")
    return [_parse_entry(e) for e in entries]


def format_gpu(islands: list[IslandSpec]) -> str:
    """The `--gpu` text for these islands; `parse_gpu(format_gpu(x)) == x`."""
    parts = []
    for i in islands:
        nodes = f"{i.nodes}x" if i.nodes != 1 else ""
        region = f"@{i.region}" if i.region else ""
        parts.append(f"{i.cloud}:{nodes}{i.count}x{i.gpu.lower()}{region}")
    return ",".join(parts)
