"""AWS live signals through boto3: EC2 service quotas minus running vCPUs, spot placement scores, spot prices.

Quotas are in vCPUs per region and instance family (P, G), separately for spot and on-demand; usage is the vCPUs
of pending and running instances (their CpuOptions, else the type's default vCPUs from DescribeInstanceTypes).
Placement scores (1..10) come from one GetSpotPlacementScores call per GPU instance type over the regions;
spot prices are the lowest current Linux price over a region's zones (DescribeSpotPriceHistory). boto3 finds
credentials and endpoints the usual way (AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> included); every call
has `timeout_s` and one attempt. Any failure is reported by the caller as a warning.
"""
from __future__ import annotations

from typing import Any

REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-west-2", "eu-central-1", "eu-north-1",
           "ap-northeast-1")
# (quota code, instance family prefix, spot?) -- EC2's vCPU-based limits.
QUOTA_CODES = (("L-7212CCBC", "p", True), ("L-417A185B", "p", False),
               ("L-3819A6DF", "g", True), ("L-DB2E81BA", "g", False))
GPU_TYPES = ["p5.48xlarge", "p5.4xlarge", "p4de.24xlarge", "p4d.24xlarge", "g6e.12xlarge", "g5.12xlarge"]


def _vcpus_of(ec2, types: set[str]) -> dict[str, float]:
    if not types:
        return {}
    answer = ec2.describe_instance_types(InstanceTypes=sorted(types))
    return {t["InstanceType"]: float(t["VCpuInfo"]["DefaultVCpus"]) for t in answer["InstanceTypes"]}


def _running_vcpus(ec2) -> dict[tuple[str, bool], float]:
    instances = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    for page in pages:
        instances += [i for res in page["Reservations"] for i in res["Instances"]]
    defaults = _vcpus_of(ec2, {i["InstanceType"] for i in instances if not i.get("CpuOptions")})
    used: dict[tuple[str, bool], float] = {}
    for inst in instances:
        cpu = inst.get("CpuOptions")
        vcpus = cpu["CoreCount"] * cpu.get("ThreadsPerCore", 1) if cpu else defaults.get(inst["InstanceType"], 0.0)
        key = (inst["InstanceType"][:1], inst.get("InstanceLifecycle") == "spot")
        used[key] = used.get(key, 0.0) + vcpus
    return used


def _spot_prices(ec2, region: str) -> list[list[Any]]:
    answer = ec2.describe_spot_price_history(InstanceTypes=GPU_TYPES, ProductDescriptions=["Linux/UNIX"],
                                             StartTime=_now_utc())
    best: dict[str, float] = {}
    for p in answer["SpotPriceHistory"]:
        best[p["InstanceType"]] = min(best.get(p["InstanceType"], float("inf")), float(p["SpotPrice"]))
    return [[region, t, price] for t, price in sorted(best.items())]


def _now_utc():
    from datetime import datetime, timezone
    return datetime.now(timezone.utc)


def fetch(*, timeout_s: float = 10.0) -> dict:
    import boto3
    from botocore.config import Config
    session = boto3.Session()
    if session.get_credentials() is None:
        raise RuntimeError("no AWS credentials configured")
    config = Config(connect_timeout=timeout_s, read_timeout=timeout_s, retries={"total_max_attempts": 1, "mode": "standard"})
    quotas, prices = [], []
    endpoint = ""
    for region in REGIONS:
        sq = session.client("service-quotas", region_name=region, config=config)
        ec2 = session.client("ec2", region_name=region, config=config)
        used = _running_vcpus(ec2)
        for code, family, spot in QUOTA_CODES:
            limit = sq.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
            quotas.append({"cloud": "aws", "region": region, "family": family, "unit": "vcpus", "limit": limit,
                           "used": used.get((family, spot), 0.0), "spot": spot,
                           "source": f"service-quotas GetServiceQuota {code} - ec2 DescribeInstances at "
                                     f"{sq.meta.endpoint_url}"})
        prices += _spot_prices(ec2, region)
        endpoint = ec2.meta.endpoint_url
    ec2 = session.client("ec2", region_name="us-east-1", config=config)
    scores = []
    for itype in GPU_TYPES:
        answer = ec2.get_spot_placement_scores(InstanceTypes=[itype], TargetCapacity=1, SingleAvailabilityZone=False,
                                               RegionNames=list(REGIONS))
        scores += [[s["Region"], itype, float(s["Score"])] for s in answer.get("SpotPlacementScores", [])]
    return {"quotas": quotas, "scores": scores, "spot_prices": prices,
            "scores_source": f"ec2 GetSpotPlacementScores at {ec2.meta.endpoint_url}",
            "prices_source": f"ec2 DescribeSpotPriceHistory at {endpoint}"}
