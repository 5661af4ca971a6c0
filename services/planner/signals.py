"""Live capacity signals (quotas minus usage, spot placement scores, spot prices, stock), and the assumptions used without them.

`Signals` is a plain value the pure planner reads. `gather_signals` is the I/O edge: per source (AWS through boto3, GCP
through google-cloud-compute, RunPod's GraphQL, Lambda's instance-types API) it asks with that source's timeout, caches
the answer in a JSON file for that source's TTL, and records every value it used as a `Reading` (value, age, source).
A source that cannot be read (no client, no credentials, a timeout, an error) becomes a warning stating the assumption
the plan makes instead, never silence.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_STOCK_CAP = 4   # islands per (cloud, region, instance type) assumed rentable when no live stock is known


@dataclass(frozen=True)
class Source:
    """How one source is read: the seconds one request may take, how long its answer is reused, and where
    (`url_env` overrides `url`; AWS endpoints come from boto3's own AWS_ENDPOINT_URL*)."""

    timeout_s: float
    ttl_s: float
    url: str = ""
    url_env: str = ""


# docs/PLANNER.md lists these; a quota moves slowly, stock and scores within minutes.
SOURCES = {"aws": Source(timeout_s=10.0, ttl_s=900.0),
           "gcp": Source(timeout_s=10.0, ttl_s=900.0, url_env="YETO_GCP_COMPUTE_URL"),
           "runpod": Source(timeout_s=10.0, ttl_s=300.0, url="https://api.runpod.io/graphql",
                            url_env="YETO_RUNPOD_API_URL"),
           "lambda": Source(timeout_s=10.0, ttl_s=300.0, url="https://cloud.lambdalabs.com/api/v1/instance-types",
                            url_env="YETO_LAMBDA_API_URL")}


@dataclass(frozen=True)
class Quota:
    """A cap on `unit` (vcpus or gpus) for instance types starting with `family` (and of GPU type `gpu`, where
    named: GCP's quotas are per GPU type) in one cloud (and region)."""

    cloud: str
    region: str | None
    family: str
    unit: str
    limit: float
    used: float = 0.0
    spot: bool = True
    gpu: str = ""

    @property
    def key(self) -> str:
        what = self.family or self.gpu or "*"
        return f"{self.cloud}/{self.region or '*'}/{what}/{'spot' if self.spot else 'on-demand'} {self.unit}"

    def covers(self, cloud: str, region: str, instance_type: str, gpu: str, spot: bool) -> bool:
        return (self.cloud == cloud and self.region in (None, region) and instance_type.startswith(self.family)
                and (not self.gpu or self.gpu.lower() == gpu.lower()) and self.spot == spot)

    def per_island(self, vcpus: float | None, count: int, nodes: int) -> float:
        """What one island of `nodes` machines draws from this quota."""
        return (vcpus or 0.0) * nodes if self.unit == "vcpus" else float(count * nodes)


@dataclass(frozen=True)
class Reading:
    """One signal value the plan used: what it is, its value, how old the answer is and where it came from."""

    cloud: str
    signal: str          # quota | placement_score | spot_price | stock | refusal | assumption
    key: str
    value: Any
    age_s: float | None  # None for an assumption
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "signal": self.signal, "key": self.key, "value": self.value,
                "age_s": None if self.age_s is None else round(self.age_s, 1), "source": self.source}


@dataclass(frozen=True)
class Signals:
    quotas: tuple[Quota, ...] = ()
    # (cloud, region, instance type) -> 1..10, or (cloud, region) -> 1..10 for every type there
    placement_scores: dict[tuple[str, ...], float] = field(default_factory=dict)
    # (cloud, gpu), or (cloud, region, instance type) with region "*" for the regions a source did not list
    stock: dict[tuple[str, ...], int] = field(default_factory=dict)
    spot_prices: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (cloud, region, type) -> $/hr
    default_stock_cap: int = DEFAULT_STOCK_CAP
    warnings: tuple[str, ...] = ()
    readings: tuple[Reading, ...] = ()
    # (cloud, region or "", gpu, count) -> why: offers a cloud refused at launch, within their cool-down (refusals.py)
    refused: dict[tuple[str, str, str, int], str] = field(default_factory=dict)

    def refusal(self, cloud: str, region: str, gpu: str, count: int) -> str | None:
        return self.refused.get((cloud, region, gpu, count)) or self.refused.get((cloud, "", gpu, count))

    def score(self, cloud: str, region: str, instance_type: str) -> float | None:
        got = self.placement_scores.get((cloud, region, instance_type))
        return got if got is not None else self.placement_scores.get((cloud, region))

    def stock_cap(self, cloud: str, region: str, instance_type: str, gpu: str) -> int:
        """Islands rentable: the region's own answer, else the type's in any other region ("*"), else the GPU's."""
        for key in ((cloud, region, instance_type), (cloud, "*", instance_type), (cloud, gpu)):
            if key in self.stock:
                return self.stock[key]
        return self.default_stock_cap


def assumptions(clouds: list[str], *, known: set[str] = frozenset(), cap: int = DEFAULT_STOCK_CAP) -> list[str]:
    """The warning for every cloud whose live signals were not read."""
    out = []
    for c in sorted(set(clouds) - set(known)):
        if c == "aws":
            out.append(f"aws: no live signals: spot quota and usage not checked, placement score unknown, catalog "
                       f"spot prices; assumed up to {cap} islands per instance type and region and 5% "
                       f"preemptions/hour. Check `aws service-quotas get-service-quota --service-code ec2 "
                       f"--quota-code L-7212CCBC`.")
        elif c == "gcp":
            out.append(f"gcp: no application-default credentials (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth "
                       f"application-default login`) or their query failed: regional GPU quotas not checked; assumed "
                       f"up to {cap} islands per instance type and region.")
        elif c == "runpod":
            out.append(f"runpod: RUNPOD_API_KEY not set or its query failed: stock unknown; assumed up to {cap} "
                       f"islands per GPU type and region.")
        elif c == "lambda":
            out.append(f"lambda: LAMBDA_API_KEY not set or its query failed: capacity unknown; assumed up to {cap} "
                       f"islands per instance type and region.")
        else:
            out.append(f"{c}: no live capacity signals are read for this cloud: quota not checked; assumed up to "
                       f"{cap} islands per instance type and region.")
    return out


def _cached(path: Path, key: str, now: float, ttl_s: float, fetch) -> tuple[Any, float]:
    """The cached answer for `key` if younger than `ttl_s`, else a fresh one (stored); with the time it was fetched."""
    cache = json.loads(path.read_text()) if path.exists() else {}
    hit = cache.get(key)
    if hit and now - hit["at"] < ttl_s:
        return hit["value"], hit["at"]
    value = fetch()
    cache[key] = {"at": now, "value": value}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cache))
    return value, now


def _failed(cloud: str, e: Exception) -> str:
    return f"{cloud}: live signals failed ({type(e).__name__}: {str(e)[:160]})"


def _secret(env, name: str, file: Path | None = None) -> str | None:
    """An API key from the environment, or from the cloud CLI's key file (`api_key = ...`); never logged."""
    if env.get(name):
        return env[name]
    if file is not None and file.exists():
        for line in file.read_text().splitlines():
            k, _, v = line.partition("=")
            if k.strip() == "api_key" and v.strip():
                return v.strip()
    return None


def _ask(cloud: str, cache_path: Path, now: float, source: Source, fetch, warnings: list[str]):
    """(answer, fetched at) from the cache or the source, or None with the failure added to `warnings`."""
    try:
        return _cached(cache_path, cloud, now, source.ttl_s, fetch)
    except Exception as e:  # noqa: BLE001 - no client, no credentials, no network, a changed API: stated, then assumed
        warnings.append(_failed(cloud, e))
        return None


def gather_signals(clouds: list[str], *, cache_path: Path, now: float, env: dict | None = None,
                   sources: dict[str, Source] | None = None) -> Signals:
    env = os.environ if env is None else env
    src = {**SOURCES, **(sources or {})}
    quotas: list[Quota] = []
    scores: dict[tuple[str, ...], float] = {}
    stock: dict[tuple[str, ...], int] = {}
    prices: dict[tuple[str, str, str], float] = {}
    readings: list[Reading] = []
    warnings: list[str] = []

    def aws():
        from yeto.services.planner import signals_aws
        return signals_aws.fetch(timeout_s=src["aws"].timeout_s)

    if "aws" in clouds and (answer := _ask("aws", cache_path, now, src["aws"], aws, warnings)):
        got, at = answer
        for q in got["quotas"]:
            quota = Quota(**{k: v for k, v in q.items() if k != "source"})
            quotas.append(quota)
            readings.append(Reading("aws", "quota", quota.key, {"limit": quota.limit, "used": quota.used},
                                    now - at, q["source"]))
        for region, itype, score in got["scores"]:
            scores[("aws", region, itype)] = score
            readings.append(Reading("aws", "placement_score", f"{region}/{itype}", score, now - at,
                                    got["scores_source"]))
        for region, itype, price in got["spot_prices"]:
            prices[("aws", region, itype)] = price
            readings.append(Reading("aws", "spot_price", f"{region}/{itype}", price, now - at, got["prices_source"]))
    gcp_project = env.get("GOOGLE_CLOUD_PROJECT") or env.get("CLOUDSDK_CORE_PROJECT")
    gcp_url = env.get(src["gcp"].url_env) or src["gcp"].url

    def gcp():
        from yeto.services.planner import signals_gcp
        return signals_gcp.fetch(project=gcp_project, url=gcp_url, timeout_s=src["gcp"].timeout_s)

    adc = Path(env.get("HOME", "~")).expanduser() / ".config" / "gcloud" / "application_default_credentials.json"
    gcp_credentials = bool(env.get("GOOGLE_APPLICATION_CREDENTIALS")) or adc.is_file()
    if "gcp" in clouds and gcp_credentials and (answer := _ask("gcp", cache_path, now, src["gcp"], gcp, warnings)):
        got, at = answer
        for q in got["quotas"]:
            quotas.append(quota := Quota(**q))
            readings.append(Reading("gcp", "quota", quota.key, {"limit": quota.limit, "used": quota.used},
                                    now - at, got["source"]))
    key = _secret(env, "RUNPOD_API_KEY")
    url = env.get(src["runpod"].url_env) or src["runpod"].url

    def runpod():
        from yeto.services.planner import signals_runpod
        return signals_runpod.fetch(key, url=url, timeout_s=src["runpod"].timeout_s)

    if "runpod" in clouds and key and (answer := _ask("runpod", cache_path, now, src["runpod"], runpod, warnings)):
        for gpu, n, status in answer[0]:
            stock[("runpod", gpu)] = n
            readings.append(Reading("runpod", "stock", gpu, {"islands": n, "stockStatus": status}, now - answer[1],
                                    f"runpod graphql gpuTypes at {url}"))
    lkey = _secret(env, "LAMBDA_API_KEY", Path(env.get("HOME", "~")).expanduser() / ".lambda_cloud" / "lambda_keys")
    lurl = env.get(src["lambda"].url_env) or src["lambda"].url

    def lambda_():
        from yeto.services.planner import signals_lambda
        return signals_lambda.fetch(lkey, url=lurl, cap=DEFAULT_STOCK_CAP, timeout_s=src["lambda"].timeout_s)

    if "lambda" in clouds and lkey and (answer := _ask("lambda", cache_path, now, src["lambda"], lambda_, warnings)):
        for region, itype, n in answer[0]:
            stock[("lambda", region, itype)] = n
            readings.append(Reading("lambda", "stock", f"{region}/{itype}", {"islands": n, "capacity": n > 0},
                                    now - answer[1], f"lambda instance-types at {lurl}"))
    known = {r.cloud for r in readings}
    warnings += assumptions(clouds, known=known)
    readings += [Reading(c, "assumption", "*", w, None, "assumption") for c in sorted(set(clouds) - known)
                 for w in assumptions([c])]
    return Signals(quotas=tuple(quotas), placement_scores=scores, stock=stock, spot_prices=prices,
                   warnings=tuple(warnings), readings=tuple(readings))
