"""Bytes of a run's output folder for a model's LoRA: `artifact/` (what a user deploys) against `resume/` (docs/ARTIFACTS.md).

The finalizer's own writer over the adapter the learners train (the recipe's defaults, or --lora-r) and the syncer's
own snapshot files for `--fragments` fragments (θ, outer momentum and broadcast shadow, f32, as the final cut writes
them); the values are the untrained adapter's, so only the sizes mean anything. Usage:

    .venv/bin/python scripts/artifact_sizes.py --model smollm2-135m [--lora-r 16] [--fragments 8]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--lora-r", type=int, default=None)
    p.add_argument("--fragments", type=int, default=8)
    args = p.parse_args()
    from yeto.learners.lm_recipe import TrainRecipe
    from yeto.learners.torch.model import load_model, resolve
    from yeto.learners.torch.tuning import apply_tuning, trainable_parameters
    from yeto.services.finalizer.artifact import write_artifact
    from yeto.services.syncer import snapshot

    recipe = TrainRecipe(model=args.model, tuning="lora", **({"lora_r": args.lora_r} if args.lora_r else {}))
    model = apply_tuning(load_model(resolve(args.model)), recipe)
    state = {n: t.detach().numpy().copy() for n, t in trainable_parameters(model)}
    flat = np.concatenate([v.ravel() for v in state.values()]).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        snaps, out = Path(tmp) / "syncer", Path(tmp) / "output"
        for frag, piece in enumerate(np.array_split(flat, args.fragments)):
            snapshot.write(snaps, snapshot.FragmentSnapshot(fragment=frag, version=1, fingerprint="fp", theta=piece,
                                                            momentum=piece, shadow=piece, ledger={}))
        write_artifact(state, recipe={"train": {**recipe.to_dict(), "data": "chat.jsonl"},
                                      "data_check": {"fingerprint": "0" * 64}},
                       out=out, run_id="r-sizes", versions={}, acked=[], snapshot_dir=snaps)
        adapter = sum((out / "artifact" / n).stat().st_size for n in ("adapter_model.safetensors", "adapter_config.json"))
        deploy, resume = folder_bytes(out / "artifact"), folder_bytes(out / "resume")
    print(f"{args.model} LoRA r {recipe.lora_r}: {flat.size} trainable values, {args.fragments} fragments")
    print(f"artifact/ {deploy / 1e6:.1f} MB (adapter {adapter / 1e6:.1f} MB, the rest tokenizer and card); "
          f"resume/ {resume / 1e6:.1f} MB = {resume / adapter:.2f}x the adapter")


if __name__ == "__main__":
    main()
