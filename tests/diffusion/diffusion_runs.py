"""What every real two-island diffusion run must show once `yeto launch --wait` returns (test_diffusion_launch.py for
the UNet, test_diffusion_launch_dit.py for the transformer families)."""
from __future__ import annotations

from pathlib import Path

from e2e_stack import Stack


def finalized_by_both(s: Stack, run_id: str, output: str) -> Path:
    """The run finalized with rounds both learners pushed to and a Diffusers LoRA with samples; its deployable
    folder (the output folder's artifact/, schemas/artifact_layout.py)."""
    assert "run finalized (max_steps)" in output, output
    merged = s.events(run_id, "RoundMerged")
    both = [e for e in merged if {"island-0", "island-1"} <= set(e["responders"])]
    assert both, f"rounds with both learners: {[(e['fragment'], e['responders']) for e in merged]}"
    (written,) = s.events(run_id, "ArtifactWritten")
    assert written["artifact_kind"] == "adapter"
    assert {"artifact/pytorch_lora_weights.safetensors", "artifact/samples.png", "manifest.json"} <= set(written["files"])
    return Path(written["local_path"]) / "artifact"
