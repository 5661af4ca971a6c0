"""GPU offerings from SkyPilot's catalog API, optionally pointed at a local copy of the catalog files.

SkyPilot computes its catalog directory (`~/.sky/catalogs/<schema>/`) once, at import, and caches the
parsed frames in module globals. So the API runs in a child process (`python -m
yeto.services.planner.catalog`) whose HOME holds `.sky/catalogs/<schema>` as a link to `--catalog-dir`:
SkyPilot reads those files with its own parsers (GCP host+GPU price joins, AWS zone folding) and, since a
user-provided file has no `.meta` checksum, never replaces it with a download.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

CATALOG_CLOUDS = ("aws", "gcp", "azure", "lambda", "runpod", "oci", "paperspace", "fluidstack", "cudo",
                  "vast", "nebius")
FIXTURE_DIR = Path(__file__).parent / "fixtures" / "catalog"


@dataclass(frozen=True)
class Offering:
    """One instance type in one region: what a `--gpu` entry with that region would rent."""

    cloud: str
    region: str
    instance_type: str
    gpu: str
    count: int
    vcpus: float | None
    memory_gb: float | None
    price: float                 # on-demand $/hr for the whole instance
    spot_price: float | None     # None where the cloud or region sells no spot capacity


def _sky_catalog():
    try:
        import sky.catalog as api  # SkyPilot >= 0.10
    except ImportError:
        import sky.clouds.service_catalog as api  # SkyPilot 0.8 / 0.9
    return api


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def query_sky(clouds: list[str]) -> list[dict]:
    """Ask SkyPilot's catalog API for every GPU offering in every region of `clouds` (runs in-process)."""
    api = _sky_catalog()
    found = api.list_accelerators(gpus_only=True, clouds=clouds, all_regions=True, case_sensitive=False)
    rows = []
    for infos in found.values():
        for i in infos:
            price = _num(i.price)
            if price is None or not i.instance_type:
                continue
            rows.append(asdict(Offering(
                cloud=str(i.cloud).lower(), region=str(i.region), instance_type=str(i.instance_type),
                gpu=str(i.accelerator_name), count=int(i.accelerator_count), vcpus=_num(i.cpu_count),
                memory_gb=_num(i.memory), price=price, spot_price=_num(i.spot_price))))
    return sorted(rows, key=lambda r: (r["cloud"], r["region"], r["instance_type"]))


def schema_version() -> str:
    return _sky_catalog().CATALOG_SCHEMA_VERSION


def catalog_failure(stderr: str, returncode: int) -> str:
    """One line for why the catalog reader failed: its last line (the exception), a download said as such."""
    lines = stderr.strip().splitlines()
    last = lines[-1] if lines else f"exit status {returncode}"
    if any(s in last for s in ("ConnectionError", "NameResolution", "Max retries", "timed out")):
        return "SkyPilot could not download it (no network?)"
    return last[-300:]


class CatalogUnavailable(ValueError):
    """SkyPilot's catalog could not be read here (no network, or no SkyPilot): a condition of this machine, not a
    wrong flag; the message says where a catalog can come from instead."""


def load_catalog(*, catalog_dir: str | Path | None = None, clouds: list[str] | None = None,
                 timeout_s: float = 300.0) -> list[Offering]:
    """Offerings for `clouds` from `catalog_dir` (a folder of `<cloud>/vms.csv`) or SkyPilot's own catalog."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="yeto-sky-home-") as home:
        if catalog_dir is not None:
            catalog_dir = Path(catalog_dir).expanduser().resolve()
            present = [c for c in CATALOG_CLOUDS if (catalog_dir / c / "vms.csv").is_file()]
            if not present:
                raise ValueError(f"--catalog-dir {catalog_dir} holds no <cloud>/vms.csv (clouds: {', '.join(CATALOG_CLOUDS)}); "
                                 f"copy SkyPilot's ~/.sky/catalogs/<version>/ there")
            clouds = [c for c in (clouds or present) if c in present]
            link = Path(home) / ".sky" / "catalogs" / schema_version()
            link.parent.mkdir(parents=True)
            # Symlink the cloud folders (not the dir): SkyPilot writes its .meta lock files next to them.
            link.mkdir()
            for c in clouds:
                (link / c).symlink_to(catalog_dir / c, target_is_directory=True)
            env["HOME"] = home
        clouds = [c for c in (clouds or CATALOG_CLOUDS) if c in CATALOG_CLOUDS]
        proc = subprocess.run([sys.executable, "-m", "yeto.services.planner.catalog", *clouds],
                              env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise CatalogUnavailable(
            f"reading the SkyPilot catalog failed: {catalog_failure(proc.stderr, proc.returncode)}; offline? pass "
            f"--catalog-dir with a copy of ~/.sky/catalogs/<version>/, or try the sample shipped with Yeto (a few real "
            f"rows per cloud, prices of a past day): --catalog-dir {FIXTURE_DIR}")
    return [Offering(**row) for row in json.loads(proc.stdout.strip().splitlines()[-1])]


if __name__ == "__main__":
    print(json.dumps(query_sky(sys.argv[1:])))
