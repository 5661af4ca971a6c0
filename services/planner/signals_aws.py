"""AWS live signals through boto3: EC2 service quotas minus running vCPUs, and spot placement scores.

Quotas are in vCPUs per region and instance family (P, G), separately for spot and on-demand. Placement
scores (1..10) come from one GetSpotPlacementScores call over the GPU instance types, per region.
Needs boto3 and credentials; any failure is reported by the caller as a warning.
"""
from __future__ import annotations

REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-central-1", "eu-north-1", "ap-northeast-1")
# (quota code, instance family prefix, spot?) -- EC2's vCPU-based limits.
QUOTA_CODES = (("L-7212CCBC", "p", True), ("L-417A185B", "p", False),
               ("L-3819A6DF", "g", True), ("L-DB2E81BA", "g", False))
SCORED_TYPES = ["p5.48xlarge", "p4de.24xlarge", "p4d.24xlarge", "g6e.12xlarge", "g5.12xlarge"]


def _running_vcpus(ec2) -> dict[tuple[str, bool], float]:
    used: dict[tuple[str, bool], float] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    for page in pages:
        for res in page["Reservations"]:
            for inst in res["Instances"]:
                family = inst["InstanceType"][:1]
                cpu = inst.get("CpuOptions", {})
                vcpus = cpu.get("CoreCount", 0) * cpu.get("ThreadsPerCore", 1)
                key = (family, inst.get("InstanceLifecycle") == "spot")
                used[key] = used.get(key, 0.0) + vcpus
    return used


def fetch() -> dict:
    import boto3
    session = boto3.Session()
    if session.get_credentials() is None:
        raise RuntimeError("no AWS credentials configured")
    quotas = []
    for region in REGIONS:
        sq = session.client("service-quotas", region_name=region)
        used = _running_vcpus(session.client("ec2", region_name=region))
        for code, family, spot in QUOTA_CODES:
            limit = sq.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
            quotas.append({"cloud": "aws", "region": region, "family": family, "unit": "vcpus", "limit": limit,
                           "used": used.get((family, spot), 0.0), "spot": spot})
    ec2 = session.client("ec2", region_name="us-east-1")
    answer = ec2.get_spot_placement_scores(InstanceTypes=SCORED_TYPES, TargetCapacity=1,
                                           SingleAvailabilityZone=False, RegionNames=list(REGIONS))
    scores = [["aws", s["Region"], float(s["Score"])] for s in answer.get("SpotPlacementScores", [])]
    return {"quotas": quotas, "scores": scores}
