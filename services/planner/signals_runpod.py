"""RunPod stock through its GraphQL API (RUNPOD_API_KEY): stock status per GPU type mapped to island caps."""
from __future__ import annotations

import json
import re
import urllib.request

URL = "https://api.runpod.io/graphql"
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


def fetch(api_key: str) -> list[tuple[str, int]]:
    req = urllib.request.Request(f"{URL}?api_key={api_key}", data=json.dumps({"query": QUERY}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as resp:
        types = json.load(resp)["data"]["gpuTypes"]
    best: dict[str, int] = {}
    for t in types:
        name = catalog_name(t.get("displayName") or t["id"], t.get("memoryInGb"))
        status = ((t.get("lowestPrice") or {}).get("stockStatus")) or "None"
        if name:
            best[name] = max(best.get(name, 0), ISLANDS_BY_STOCK.get(status, 0))
    return sorted(best.items())
