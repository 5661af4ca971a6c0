"""What an artifact carries to be resumed: the syncer's final fragment snapshots (θ and the outer momentum) and
the lineage key (`manifest["resume"]`) that `yeto launch --resume-from` checks strictly (schemas/lineage.py).

The snapshots are the ones the final cut wrote (`<state>/syncer/<run>/frag-*.safetensors`, at the artifact's
versions), copied byte for byte into the output folder's `resume/`, beside the deployable `artifact/`
(schemas/artifact_layout.py). A resumed or branched run's syncer seeds its fragments from them.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from yeto.schemas.artifact_layout import DEPLOY, RESUME, is_resume_file, resume_name
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.lineage import key_of, tokenizer_digests


def write(out: Path, snapshot_dir: Path | None) -> list[str]:
    """Copy the final fragment snapshots into `out/resume/`; the names written (none without snapshots)."""
    if snapshot_dir is None or not Path(snapshot_dir).is_dir():
        return []
    names = []
    for src in sorted(Path(snapshot_dir).glob("frag-*.safetensors")):
        (out / RESUME).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out / resume_name(src.name))
        names.append(resume_name(src.name))
    return names


def _header(path: Path) -> dict[str, Any]:
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        return json.loads((f.metadata() or {}).get("yeto", "{}"))


def describe(out: Path, files: list[str], recipe: dict[str, Any] | LaunchRecipe) -> dict[str, Any]:
    """`manifest["resume"]`: the lineage key, the layout fingerprint, each fragment's version, each learner's steps."""
    from transformers import AutoTokenizer

    tokenizer_sha, template_sha = tokenizer_digests(AutoTokenizer.from_pretrained(str(out / DEPLOY)))
    headers = {h["fragment"]: h for h in (_header(out / f) for f in sorted(files) if is_resume_file(f))}
    steps: dict[str, int] = {}
    for h in headers.values():             # the last step of each learner's pushes that θ holds
        for learner, entry in h.get("ledger", {}).items():
            steps[learner] = max(steps.get(learner, 0), int(entry.get("last_step", 0)))
    fingerprints = sorted({h["fingerprint"] for h in headers.values()})
    typed = LaunchRecipe.upcast(recipe)
    train = typed.train
    return {"key": key_of(typed, tokenizer_sha256=tokenizer_sha, chat_template_sha256=template_sha),
            "layout_fingerprint": fingerprints[0] if len(fingerprints) == 1 else None,
            "tokenizer_sha256": tokenizer_sha, "chat_template_sha256": template_sha,
            "lora": {"r": train.lora_r, "alpha": train.lora_alpha, "dropout": train.lora_dropout,
                     "target_modules": list(train.target_modules)},
            "data_fingerprint": typed.data_check.fingerprint,
            "versions": {str(p): h["version"] for p, h in sorted(headers.items())},
            "learner_steps": dict(sorted(steps.items())), "start_step": max(steps.values(), default=0),
            "files": sorted(f for f in files if is_resume_file(f))}
