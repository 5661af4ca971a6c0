"""Every task the launcher builds (islands: single node, multi-node, on-demand, AMD, CPU; the head) passes SkyPilot's
own optimizer offline: a few catalog rows in SkyPilot's format under a temporary HOME, the clouds marked enabled in
SkyPilot's own cache, and each task through SkyPilot's YAML, validation and optimizer (sky_offline.py, run in a
subprocess because SkyPilot fixes its paths under ~ when imported)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sky")
pytestmark = pytest.mark.timeout(120)

A100X8 = ("{'Gpus': [{'Name': 'A100', 'Manufacturer': 'NVIDIA', 'Count': 8, 'MemoryInfo': {'SizeInMiB': 40960}}], "
          "'TotalGpuMemoryInMiB': 327680}")
CATALOGS = {
    "common/accelerators.csv": "AcceleratorName,Clouds\n"
                               "A100,\"['AWS', 'Azure', 'GCP', 'Lambda', 'OCI', 'Vast']\"\n"
                               "MI300X,['RunPod']\n",
    "aws/vms.csv": "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,"
                   "AvailabilityZone\n"
                   "m6i.large,,,2.0,8.0,,0.096,0.037900,us-east-1,use1-az1\n"
                   "m6i.xlarge,,,4.0,16.0,,0.192,0.075800,us-east-1,use1-az1\n"
                   "m6i.xlarge,,,4.0,16.0,,0.192,0.071200,us-east-2,use2-az1\n"
                   "m6i.2xlarge,,,8.0,32.0,,0.384,0.151600,us-east-1,use1-az1\n"
                   f"p4d.24xlarge,A100,8.0,96.0,1152.0,\"{A100X8}\",32.7726,9.831800,us-east-2,use2-az1\n",
    "runpod/vms.csv": "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Region,SpotPrice,Price\n"
                      "8x_MI300X_SECURE,MI300X,8.0,192.0,2048.0,MI300X,US,,23.92\n",
}
A100 = {"cloud": "aws", "gpu": "A100", "count": 8, "nodes": 1, "region": "us-east-2", "spot": True}


def island(tmp_path: Path, island: int, **spec) -> tuple[str, dict]:
    data, creds, ca, env = (tmp_path / n for n in ("chat.jsonl", "learner.json", "ca.pem", "env.json"))
    for f in (data, creds, ca, env):
        f.write_text("{}\n")
    return "island", {"run_id": "r1", "island": island, "generation": 0, "num_islands": 5,
                      "nats_url": "tls://203.0.113.7:4222", "spec": {**A100, **spec},
                      "recipe": {"train": {"model": "m", "data": str(data)}},
                      "files": {"creds": str(creds), "ca": str(ca), "env_file": str(env)}}


def optimized(tmp_path: Path, tasks: dict) -> dict:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    request = {"catalogs": CATALOGS, "clouds": ["AWS", "RunPod"], "tasks": tasks}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("sky_offline.py"))], input=json.dumps(request),
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=100)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("CHOSEN ")), None)
    assert done.returncode == 0 and line, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(line.removeprefix("CHOSEN "))


def test_every_task_the_launcher_builds_passes_skypilots_optimizer_offline(tmp_path):
    got = optimized(tmp_path, {
        "single": island(tmp_path, 0),
        "multi": island(tmp_path, 1, nodes=2),
        "on_demand": island(tmp_path, 2, spot=False),
        "amd": island(tmp_path, 3, cloud="runpod", gpu="MI300X", region=None, spot=False),
        "cpu": island(tmp_path, 4, gpu="cpu", count=2, region=None),
        "head": ("head", {"run_id": "r1", "bundle_dir": str(tmp_path), "cloud": "aws"}),
    })
    assert got.pop("schema") in ("v6", "v7")      # the catalog formats these rows follow (SkyPilot 0.9.2: v6, 0.9.3: v7)
    assert {k: (v["cloud"], v["instance_type"], v["use_spot"], v["num_nodes"]) for k, v in got.items()} == {
        "single": ("AWS", "p4d.24xlarge", True, 1), "multi": ("AWS", "p4d.24xlarge", True, 2),
        "on_demand": ("AWS", "p4d.24xlarge", False, 1), "amd": ("RunPod", "8x_MI300X_SECURE", False, 1),
        "cpu": ("AWS", "m6i.xlarge", True, 1), "head": ("AWS", "m6i.xlarge", False, 1)}
    assert got["head"]["ports"] == ["4222"] and got["head"]["file_mounts"] == {"~/.yeto/head": str(tmp_path.resolve())}
    for name in ("single", "multi", "on_demand", "amd", "cpu"):    # the file mounts survive SkyPilot's YAML
        assert set(got[name]["file_mounts"]) == {"~/.yeto/island/learner.json", "~/.yeto/island/ca.pem",
                                                 "~/.yeto/island/env.json", "~/.yeto/data/chat.jsonl"}
        assert got[name]["envs"]["YETO_NATS_CREDS"] == "~/.yeto/island/learner.json"
