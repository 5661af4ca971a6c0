"""SkyPilot's catalog API over a temporary catalog home seeded with real-format v8 rows for five clouds."""
import os
import shutil
import subprocess
import sys

import pytest

from yeto.services.planner.catalog import FIXTURE_DIR, Offering, load_catalog, schema_version

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def seeded_home(tmp_path_factory):
    """HOME with ~/.sky/catalogs/<schema>/<cloud>/vms.csv, as SkyPilot itself lays them out."""
    home = tmp_path_factory.mktemp("home")
    shutil.copytree(FIXTURE_DIR, home / ".sky" / "catalogs" / schema_version(), ignore=shutil.ignore_patterns("*.md"))
    return home


def test_skypilot_reads_a_seeded_catalog_home_for_five_clouds(seeded_home):
    env = dict(os.environ, HOME=str(seeded_home))
    out = subprocess.run([sys.executable, "-c",
                          "import json; from yeto.services.planner.catalog import query_sky;"
                          "print(json.dumps(query_sky(['aws','gcp','azure','lambda','runpod'])))"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    offers = [Offering(**r) for r in __import__("json").loads(out.stdout.splitlines()[-1])]
    assert {o.cloud for o in offers} == {"aws", "gcp", "azure", "lambda", "runpod"}
    p5 = {(o.region, o.spot_price) for o in offers if o.instance_type == "p5.48xlarge"}
    # SkyPilot folds zones into regions keeping the cheapest row: us-east-2's two zones -> 11.2543.
    assert ("us-east-2", 11.2543) in p5
    gcp = next(o for o in offers if o.instance_type == "a3-highgpu-1g" and o.region == "us-central1")
    # GCP: SkyPilot joins the H100 accelerator row (4.20076) with its a3 host VM (1.18251).
    assert gcp.gpu == "H100" and gcp.count == 1 and gcp.price == pytest.approx(4.20076 + 1.18251)
    assert all(o.gpu != "" and o.count >= 1 for o in offers)
    assert next(o for o in offers if o.cloud == "lambda").spot_price is None


@pytest.fixture(scope="module")
def fixture_catalog():
    return load_catalog(catalog_dir=FIXTURE_DIR)


def test_catalog_dir_points_the_api_at_a_local_copy(fixture_catalog):
    assert {o.cloud for o in fixture_catalog} == {"aws", "gcp", "azure", "lambda", "runpod"}
    assert any(o.instance_type == "gpu_8x_h100_sxm5" and o.price == 31.92 for o in fixture_catalog)


def test_catalog_dir_cloud_filter_and_missing_files(tmp_path):
    only = load_catalog(catalog_dir=FIXTURE_DIR, clouds=["runpod"])
    assert only and {o.cloud for o in only} == {"runpod"}
    with pytest.raises(ValueError, match="holds no <cloud>/vms.csv"):
        load_catalog(catalog_dir=tmp_path)
