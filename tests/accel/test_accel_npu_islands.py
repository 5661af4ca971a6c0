"""Ascend islands through `--gpu`: `local:<n>xnpu` (or the NPU's model name) is a local NPU island that the
launcher starts with `--device npu`; a cloud Ascend entry is refused saying what exists, as the installed SkyPilot
rents none; NF4 and CuPy are refused on NPUs by name; and on this machine (no Ascend driver, no torch_npu) an NPU
island is refused before anything starts, and a learner told `--device npu` exits saying what to install."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))
from learner_tiny import write_chat_jsonl, write_model_dir
from yeto.cli.launch import checks
from yeto.cli.main import main
from yeto.infra.accelerators import npu_devices
from yeto.schemas.capacity import Capacity, over_capacity
from yeto.schemas.gpuspec import IslandSpec, format_gpu, parse_gpu
from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.local import torch_learner

pytestmark = pytest.mark.timeout(120)


def test_local_npu_islands_parse_by_kind_or_by_ascend_model_and_round_trip():
    islands = parse_gpu("local:1xnpu,local:8xAscend910B,local:2xascend910c")
    assert islands == [IslandSpec("local", "npu", 1), IslandSpec("local", "npu", 8), IslandSpec("local", "npu", 2)]
    assert parse_gpu(format_gpu(islands)) == islands     # cloud Ascend entries: tests/planner/test_planner_gpuspec.py


def test_the_installed_skypilot_indeed_has_no_ascend_cloud_or_accelerator():
    import sky
    assert not [c for c in sky.CLOUD_REGISTRY if "huawei" in c or "ascend" in c]
    mentions = []
    for path in Path(sky.__file__).parent.rglob("*.py"):
        text = path.read_text(errors="replace")
        mentions += [str(path) for m in re.finditer(r"(?i)\bascend(?!ing)|huawei|\bnpu\b", text)]
    assert not mentions, f"SkyPilot now names Ascend: revisit gpuspec.NO_CLOUD_ASCEND ({mentions[:3]})"


def test_npu_islands_count_against_the_hosts_npus_not_its_cpus():
    fleet = [{"cloud": "local", "gpu": "npu", "count": 8}, {"cloud": "local", "gpu": "cpu", "count": 1}]
    assert over_capacity(fleet, Capacity(cpus=1, gpus=0, npus=8)) is None
    why = over_capacity(fleet, Capacity(cpus=1, gpus=0, npus=4))
    assert "8 Ascend NPUs and this machine has 4" in why and "use at most 4" in why


def test_npus_are_counted_from_the_drivers_device_files_narrowed_like_the_runtime(tmp_path, monkeypatch):
    for name in ("davinci0", "davinci1", "davinci2", "davinci3", "davinci_manager", "devmm_svm", "hisi_hdc"):
        (tmp_path / name).touch()
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    assert npu_devices(str(tmp_path)) == 4
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "1,3")
    assert npu_devices(str(tmp_path)) == 2
    assert npu_devices(str(tmp_path / "absent")) == 0


def test_nf4_on_npu_islands_is_refused_naming_what_to_use():
    fit = dict(weights_gb=16.0, tuning="lora", base_quantization="nf4", seq_len=1024, micro_batch=1)
    with pytest.raises(ValueError, match=r"local:1xnpu: --base-quantization nf4 .* no Ascend NPU backend; use "
                                         r"--base-quantization none"):
        checks.check_memory_fit(parse_gpu("local:1xnpu"), **fit)
    checks.check_memory_fit(parse_gpu("local:1xnpu"), **{**fit, "base_quantization": "none"})


def test_backends_that_cannot_run_on_an_npu_are_refused_for_npu_islands_by_name():
    from argparse import Namespace

    from yeto.cli.launch import island_backend
    args = Namespace(island_backend="megatron", model_kind="lm", tuning="full", external_learners=0,
                     gpu="local:1xcpu,local:2xnpu")
    with pytest.raises(ValueError, match=r"--island-backend megatron does not run on Ascend NPUs .* --island-backend "
                                         r"torch on NPU islands"):
        island_backend.apply(args, {})
    assert island_backend.apply(Namespace(**{**vars(args), "gpu": "local:2xcpu"}), {}) == {"island_backend": "megatron"}
    assert island_backend.apply(Namespace(**{**vars(args), "island_backend": "torch"}), {}) == {"island_backend": "torch"}


def test_the_syncer_refuses_cupy_by_name_where_no_cuda_device_is_usable():
    probe = "import cupy, sys; sys.exit(0 if cupy.cuda.is_available() else 1)"
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0:
        pytest.skip("a CUDA device with cupy is usable here: cupy is a valid choice")
    env = {**os.environ, "YETO_SYNCER_BACKEND": "cupy"}
    done = subprocess.run([sys.executable, "-c", "import yeto.services.syncer.backend"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "YETO_SYNCER_BACKEND=cupy: CuPy's kernels need a CUDA device" in done.stderr
    env["YETO_SYNCER_BACKEND"] = "numpy"
    assert subprocess.run([sys.executable, "-c", "import yeto.services.syncer.backend"], env=env,
                          timeout=60).returncode == 0


@pytest.mark.skipif(npu_devices() > 0, reason="this machine has Ascend NPUs")
def test_an_npu_island_on_a_machine_without_npus_is_refused_before_anything_starts(capsys, tmp_path):
    model, data = write_model_dir(tmp_path / "model"), write_chat_jsonl(tmp_path / "chat.jsonl", 40)
    code = main(["--state-dir", str(tmp_path / "state"), "launch", "--gpu", "local:1xnpu", "--model", str(model),
                 "--data", str(data)])
    err = capsys.readouterr().err
    assert code == 2 and "1 Ascend NPUs and this machine has 0" in err and "local:1xcpu" in err, err
    assert not (tmp_path / "state" / "stack.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(npu_devices() > 0, reason="this machine has Ascend NPUs")
def test_the_launcher_starts_an_npu_rank_with_device_npu_and_the_learner_says_what_is_missing(tmp_path):
    model, data = write_model_dir(tmp_path / "model"), write_chat_jsonl(tmp_path / "chat.jsonl", 40)
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"model": str(model), "data": str(data), "seq_len": 64, "max_steps": 2}))
    launch = IslandLaunch(run_id="r1", island=0, generation=0, num_islands=1, nats_url="nats://127.0.0.1:1",
                          spec={"cloud": "local", "gpu": "npu", "count": 1}, recipe={"train": {"model": str(model)}})
    argv = torch_learner(launch, recipe, 0, 29500)
    assert argv[argv.index("--device") + 1] == "npu"
    done = subprocess.run([*argv, "--no-sync"], capture_output=True, text=True, timeout=110)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: --device npu needs torch_npu" in done.stderr and "docs/ASCEND.md" in done.stderr
