"""Live capacity signals (quotas minus usage, spot placement scores, stock), and the assumptions used without them.

`Signals` is a plain value the pure planner reads. `gather_signals` is the I/O edge: it reads AWS (service
quotas, running spot vCPUs, EC2 spot placement scores) when boto3 and credentials exist and RunPod stock when
RUNPOD_API_KEY is set, caches answers in a JSON file for `ttl_s`, and otherwise states each assumption as a
warning, so the plan never looks more certain than it is.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_STOCK_CAP = 4   # islands per (cloud, region, instance type) assumed rentable when no live stock is known


@dataclass(frozen=True)
class Quota:
    """A cap on `unit` (vcpus or gpus) for instance types starting with `family` in one cloud (and region)."""

    cloud: str
    region: str | None
    family: str
    unit: str
    limit: float
    used: float = 0.0
    spot: bool = True

    @property
    def key(self) -> str:
        return f"{self.cloud}/{self.region or '*'}/{self.family or '*'}/{'spot' if self.spot else 'on-demand'} {self.unit}"


@dataclass(frozen=True)
class Signals:
    quotas: tuple[Quota, ...] = ()
    placement_scores: dict[tuple[str, str], float] = field(default_factory=dict)   # (cloud, region) -> 1..10
    stock: dict[tuple[str, str], int] = field(default_factory=dict)                # (cloud, gpu) -> islands
    default_stock_cap: int = DEFAULT_STOCK_CAP
    warnings: tuple[str, ...] = ()


def assumptions(clouds: list[str], *, known: set[str] = frozenset(), cap: int = DEFAULT_STOCK_CAP) -> list[str]:
    """The warning for every cloud whose live signals were not read."""
    out = []
    for c in sorted(set(clouds) - set(known)):
        if c == "aws":
            out.append(f"aws: no live signals (boto3 or credentials missing): spot quota and usage not checked, "
                       f"placement score unknown; assumed up to {cap} islands per instance type and region and 5% "
                       f"preemptions/hour. Check `aws service-quotas get-service-quota --service-code ec2 "
                       f"--quota-code L-7212CCBC`.")
        elif c == "runpod":
            out.append(f"runpod: RUNPOD_API_KEY not set: stock unknown; assumed up to {cap} islands per GPU type and region.")
        else:
            out.append(f"{c}: no live capacity signals are read for this cloud: quota not checked; assumed up to "
                       f"{cap} islands per instance type and region.")
    return out


def _cached(path: Path, key: str, now: float, ttl_s: float, fetch):
    cache = json.loads(path.read_text()) if path.exists() else {}
    hit = cache.get(key)
    if hit and now - hit["at"] < ttl_s:
        return hit["value"]
    value = fetch()
    cache[key] = {"at": now, "value": value}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cache))
    return value


def gather_signals(clouds: list[str], *, cache_path: Path, now: float, ttl_s: float = 900.0,
                   env: dict | None = None) -> Signals:
    env = os.environ if env is None else env
    quotas, scores, stock, known, warnings = [], {}, {}, set(), []
    if "aws" in clouds:
        try:
            from yeto.services.planner import signals_aws
            got = _cached(cache_path, "aws", now, ttl_s, signals_aws.fetch)
            quotas += [Quota(**q) for q in got["quotas"]]
            scores.update({(c, r): s for c, r, s in got["scores"]})
            known.add("aws")
        except Exception as e:  # noqa: BLE001 - no boto3, no credentials, no network: fall back to stated assumptions
            warnings.append(f"aws: live signals failed ({type(e).__name__}: {str(e)[:120]})")
    if "runpod" in clouds and env.get("RUNPOD_API_KEY"):
        try:
            from yeto.services.planner import signals_runpod
            got = _cached(cache_path, "runpod", now, ttl_s, lambda: signals_runpod.fetch(env["RUNPOD_API_KEY"]))
            stock.update({("runpod", gpu): n for gpu, n in got})
            known.add("runpod")
        except Exception as e:  # noqa: BLE001 - no network or a changed API: the plan says so and assumes
            warnings.append(f"runpod: stock query failed ({type(e).__name__}: {str(e)[:120]})")
    warnings += assumptions(clouds, known=known)
    return Signals(quotas=tuple(quotas), placement_scores=scores, stock=stock, warnings=tuple(warnings))
