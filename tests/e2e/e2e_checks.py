"""What the end-to-end tests check on a run: the versions each fragment's rounds reached, and the held-out loss
of the base model or of an artifact on it."""
from __future__ import annotations

import json
from pathlib import Path


def round_versions(merged: list[dict]) -> dict[int, list[int]]:
    """fragment -> the global versions of its RoundMerged events, in stream order."""
    out: dict[int, list[int]] = {}
    for e in merged:
        out.setdefault(e["fragment"], []).append(e["global_version"])
    return out


def heldout_loss(model_dir: Path, artifact: Path | None, rows: list[dict]) -> float:
    """Mean next-token loss over whole held-out conversations: of the base model, or of a run's output folder's
    `artifact/` on it (a peft adapter loaded with PeftModel.from_pretrained, or a full model directory)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    deploy = None if artifact is None else artifact / "artifact"     # the output folder's deployable files
    if artifact is None:
        model = AutoModelForCausalLM.from_pretrained(model_dir)
    elif json.loads((artifact / "manifest.json").read_text())["kind"] == "adapter":
        from peft import PeftModel
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), deploy)
    else:
        model = AutoModelForCausalLM.from_pretrained(deploy)
    model.eval()
    total = count = 0.0
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([tok.apply_chat_template(row["messages"], tokenize=True, return_dict=False)])
            n = ids.shape[1] - 1
            total += model(input_ids=ids, labels=ids).loss.item() * n
            count += n
    return total / count
