"""The alias table: resolution of aliases, Hub ids and local paths, and the README table kept in sync."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from yeto.infra.model_source import resolve_model
from yeto.schemas.model_table import MODELS

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]


def test_aliases_are_unique_and_sizes_are_positive_or_hub():
    assert len({m.alias for m in MODELS}) == len(MODELS)
    assert all(m.min_vram_gb is None or m.min_vram_gb > 0 for m in MODELS)


def test_the_readme_calls_tested_only_models_with_a_run_recorded_here():
    """"Tested" is a run recorded in docs/BENCHMARK_RESULTS.md, never a claim copied from elsewhere."""
    tested_part = (ROOT / "README.md").read_text().split("<!-- models:begin -->")[1].split("Supported aliases")[0]
    assert {m.alias for m in MODELS if f"`{m.alias}`" in tested_part} == {m.alias for m in MODELS if m.recorded_run}
    assert "real hardware" not in tested_part


def test_resolve_alias_hub_id_and_unknown():
    assert resolve_model("llama31-70b").hf_id == "meta-llama/Llama-3.1-70B"
    assert resolve_model("llama31-70b").weights_gb == 141
    assert resolve_model("meta-llama/Llama-3.1-70B").alias == "llama31-70b"
    assert resolve_model("someorg/some-model").weights_gb is None
    with pytest.raises(ValueError, match="Did you mean qwen35-9b"):
        resolve_model("qwen35-9")


def test_local_path_size_comes_from_safetensors_headers(tmp_path):
    save_file({"a": torch.zeros(1000, 500), "b": torch.zeros(250)}, str(tmp_path / "model.safetensors"))
    ref = resolve_model(str(tmp_path))
    assert ref.local_path == str(tmp_path.resolve()) and ref.weights_gb == pytest.approx(500_250 * 2 / 1e9)


def test_gen_model_table_rejects_a_readme_without_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# Yeto\n")
    out = subprocess.run([sys.executable, str(ROOT / "scripts/gen_model_table.py"), "--check", "--readme", str(readme)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "lacks the markers" in out.stderr


def test_gen_model_table_writes_then_checks_clean(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- models:begin -->\nstale\n<!-- models:end -->\noutro\n")
    script = [sys.executable, str(ROOT / "scripts/gen_model_table.py"), "--readme", str(readme)]
    assert subprocess.run(script + ["--check"]).returncode == 1
    assert subprocess.run(script).returncode == 0
    assert subprocess.run(script + ["--check"]).returncode == 0
    text = readme.read_text()
    assert "| `glm52` | `zai-org/GLM-5.2` | 1488 |" in text and "| `kimi-k3` | `moonshotai/Kimi-K3` | (Hub) |" in text
    assert text.startswith("intro\n") and text.endswith("outro\n")


def test_repository_readme_table_is_in_sync_with_models_py():
    readme = ROOT / "README.md"
    if not readme.exists() or "<!-- models:begin -->" not in readme.read_text():
        pytest.skip("README.md has no <!-- models:begin --> markers yet (the lead adds them)")
    assert subprocess.run([sys.executable, str(ROOT / "scripts/gen_model_table.py"), "--check"]).returncode == 0


def test_a_local_non_safetensors_file_resolves_without_a_size(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    assert resolve_model(str(gguf)).weights_gb is None
