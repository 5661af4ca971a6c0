"""Lambda capacity through its public API (LAMBDA_API_KEY, or ~/.lambda_cloud/lambda_keys as SkyPilot keeps it).

GET /api/v1/instance-types answers, per instance type, `regions_with_capacity_available`: the regions where one
can be launched now. That is a stock signal: a listed region is assumed to hold `cap` islands (the planner's
DEFAULT_STOCK_CAP: the API gives no count), any region not listed for a type holds none ("*" stands for them). The
key travels in an Authorization header, never in the URL.
"""
from __future__ import annotations

import json
import urllib.request


def fetch(api_key: str, *, url: str, cap: int, timeout_s: float = 10.0) -> list[list]:
    """[[region, instance type, islands], ...], with region "*" (0 islands) for the regions not listed per type."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        data = json.load(resp).get("data")
    if not isinstance(data, dict):
        raise RuntimeError("lambda answered no instance types (no 'data' object)")
    out: list[list] = []
    for name, entry in sorted(data.items()):
        regions = sorted({r["name"] for r in entry.get("regions_with_capacity_available") or []})
        out += [[r, name, cap] for r in regions] + [["*", name, 0]]
    return out
