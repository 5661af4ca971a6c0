"""GCP regional GPU quotas through google-cloud-compute: Compute Engine's `regions.list`, each region's quotas.

One `RegionsClient.list(project=...)` (REST transport, one attempt, `timeout_s`) returns every region with its quotas.
Metric `NVIDIA_<GPU>_GPUS` caps the on-demand GPUs of that type in the region, `PREEMPTIBLE_NVIDIA_<GPU>_GPUS` the spot
(preemptible) ones; where a region has no preemptible quota for a type (absent, or a limit of 0), spot VMs draw on the
on-demand quota (GCP's rule), so that one stands for spot too. Virtual-workstation (`_VWS_`) and committed metrics
are not capacity one rents, and are skipped. Credentials: google.auth's application-default chain
(GOOGLE_APPLICATION_CREDENTIALS or gcloud's application-default file); project: $GOOGLE_CLOUD_PROJECT, else the
credentials'. `url` (YETO_GCP_COMPUTE_URL) points the client at another endpoint (the tests' recorded server).
"""
from __future__ import annotations

import re
from typing import Any

SCOPE = "https://www.googleapis.com/auth/compute.readonly"
_METRIC = re.compile(r"^(PREEMPTIBLE_)?NVIDIA_([A-Z0-9_]+?)_GPUS$")


def gpu_of(metric: str) -> tuple[str, bool] | None:
    """(GPU name as SkyPilot's catalog spells it, spot?) for a GPU quota metric, None for any other metric."""
    m = _METRIC.match(metric)
    if m is None or "VWS" in m.group(2):
        return None
    return m.group(2).replace("_", "-"), m.group(1) is not None


def quotas_of(regions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The planner's quota rows (cloud, region, gpu, unit gpus, limit, used, spot) from `regions.list`'s items."""
    out = []
    for region in regions:
        found: dict[tuple[str, bool], tuple[float, float]] = {}
        for q in region.get("quotas") or []:
            if (got := gpu_of(str(q.get("metric", "")))) is not None:
                found[got] = (float(q.get("limit") or 0.0), float(q.get("usage") or 0.0))
        for gpu in sorted({g for g, _ in found}):
            on_demand = found.get((gpu, False))
            spot = found.get((gpu, True))
            if spot is None or spot[0] <= 0:      # no preemptible quota: spot VMs count against the on-demand one
                spot = on_demand
            for is_spot, got in ((False, on_demand), (True, spot)):
                if got is not None:
                    out.append({"cloud": "gcp", "region": region["name"], "family": "", "gpu": gpu, "unit": "gpus",
                                "limit": got[0], "used": got[1], "spot": is_spot})
    return out


def fetch(*, project: str | None, url: str = "", timeout_s: float = 10.0) -> dict[str, Any]:
    """{"quotas": [...], "source": "..."}: every region's GPU quotas minus usage, through google-cloud-compute."""
    import google.auth
    from google.api_core.client_options import ClientOptions
    from google.cloud import compute_v1

    credentials, default_project = google.auth.default(scopes=[SCOPE])
    project = project or default_project
    if not project:
        raise RuntimeError("no GCP project: set GOOGLE_CLOUD_PROJECT (or use credentials that name one)")
    client = compute_v1.RegionsClient(credentials=credentials, transport="rest",
                                      client_options=ClientOptions(api_endpoint=url) if url else None)
    pages = client.list(project=project, retry=None, timeout=timeout_s)
    regions = [{"name": r.name, "quotas": [{"metric": q.metric, "limit": q.limit, "usage": q.usage} for q in r.quotas]}
               for r in pages]
    endpoint = url or "compute.googleapis.com"
    return {"quotas": quotas_of(regions), "source": f"gcp compute regions.list (project {project}) at {endpoint}"}
