"""The --gpu grammar: round trips, canonical names, and errors that name the entry and list what is known."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from yeto.schemas.gpuspec import KNOWN_CLOUDS, KNOWN_GPUS, IslandSpec, format_gpu, parse_gpu
from yeto.services.planner.gpus import GPUS

pytestmark = pytest.mark.timeout(60)


def test_product_examples_parse_to_islands():
    assert parse_gpu("aws:8xa100@us-east-2,runpod:8xh100@CA") == [
        IslandSpec(cloud="aws", gpu="A100", count=8, region="us-east-2"),
        IslandSpec(cloud="runpod", gpu="H100", count=8, region="CA")]
    assert parse_gpu("gcp:2x8xH100-MEGA") == [IslandSpec(cloud="gcp", gpu="H100-MEGA", count=8, nodes=2)]
    assert parse_gpu("local:1xcpu, local:2xcuda") == [IslandSpec("local", "cpu", 1), IslandSpec("local", "cuda", 2)]


island = st.builds(IslandSpec, cloud=st.sampled_from([c for c in KNOWN_CLOUDS if c != "local"]),
                   gpu=st.sampled_from(KNOWN_GPUS), count=st.integers(1, 16), nodes=st.integers(1, 8),
                   region=st.one_of(st.none(), st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,12}", fullmatch=True)))


@given(st.lists(island, min_size=1, max_size=6))
def test_format_then_parse_round_trips(islands):
    assert parse_gpu(format_gpu(islands)) == islands


@pytest.mark.parametrize("text, names", [
    ("aws:8xa100,azur:8xa100", "'azur:8xa100'"),
    ("aws:8xb300@us-east-1", "unknown GPU 'b300'"),
    ("aws:8a100", "does not match"),
    ("local:1xh100", "'cpu', 'cuda' or 'npu'"),
    ("local:1xcpu@here", "no region"),
    ("aws:0xh100", "at least 1"),
    ("aws:8xh100,", "empty entry"),
    # Ascend: no SkyPilot cloud rents it (tests/accel/test_accel_npu_islands.py checks the installed SkyPilot)
    ("aws:8xascend910b", "'aws:8xascend910b': no cloud SkyPilot knows rents Ascend NPUs"),
    ("gcp:8xnpu@europe-west4", "local:<count>xnpu, or join it to a cloud run with `yeto join --device npu`"),
    ("huaweicloud:8xascend910b", "unknown cloud 'huaweicloud' (no cloud SkyPilot knows rents Ascend NPUs"),
    ("local:1xascend310p", "not an Ascend training NPU"),
])
def test_errors_name_the_bad_entry_and_list_known_clouds_and_gpus(text, names):
    with pytest.raises(ValueError) as e:
        parse_gpu(text)
    msg = str(e.value)
    assert names in msg and "Known clouds: aws, gcp" in msg and "H100" in msg and "runpod" in msg


def test_known_clouds_are_skypilot_clouds():
    from yeto.services.planner.catalog import _sky_catalog
    assert set(KNOWN_CLOUDS) - {"local"} <= set(_sky_catalog().ALL_CLOUDS)


def test_every_planner_gpu_is_writable_in_the_grammar():
    assert set(GPUS) <= set(KNOWN_GPUS)
