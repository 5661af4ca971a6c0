"""RunPod stock through its GraphQL API (RUNPOD_API_KEY): stock status per GPU type mapped to island caps.

The key travels in an Authorization header (as RunPod's own SDK sends it), never in the URL, so no error message
or proxy log can carry it.
"""
from __future__ import annotations

import json
import re
import urllib.request

QUERY = "query { gpuTypes { id displayName memoryInGb lowestPrice(input: {gpuCount: 1}) { stockStatus } } }"
ISLANDS_BY_STOCK = {"High": 8, "Medium": 4, "Low": 1}   # anything else (None, null) means 0


def catalog_name(display: str, memory_gb: float | None) -> str | None:
    """RunPod's display name (e.g. 'A100 80GB PCIe', 'RTX A6000') as SkyPilot's accelerator name."""
    d = display.upper().replace("NVIDIA ", "")
    if d.startswith("A100"):
        return "A100-80GB" if (memory_gb or 0) >= 80 or "80GB" in d else "A100"
    for name in ("H200", "H100", "B200", "L40S", "L40", "L4", "A40", "A6000", "A5000", "A4000"):
        if re.search(rf"\b{name}\b", d):
            return name
    m = re.search(r"RTX (\d{4})", d)
    return f"RTX{m.group(1)}" if m else None


def fetch(api_key: str, *, url: str, timeout_s: float = 10.0) -> list[list]:
    """[[catalog GPU name, islands, RunPod's best stockStatus], ...] for the GPU types RunPod lists."""
    req = urllib.request.Request(url, data=json.dumps({"query": QUERY}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        answer = json.load(resp)
    if answer.get("errors") or not (answer.get("data") or {}).get("gpuTypes"):
        raise RuntimeError(f"runpod answered no gpuTypes: {str(answer.get('errors'))[:120]}")
    best: dict[str, tuple[int, str]] = {}
    for t in answer["data"]["gpuTypes"]:
        name = catalog_name(t.get("displayName") or t["id"], t.get("memoryInGb"))
        status = ((t.get("lowestPrice") or {}).get("stockStatus")) or "None"
        if name and ISLANDS_BY_STOCK.get(status, 0) >= best.get(name, (-1, ""))[0]:
            best[name] = (ISLANDS_BY_STOCK.get(status, 0), status)
    return [[name, n, status] for name, (n, status) in sorted(best.items())]
