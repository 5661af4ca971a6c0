"""`yeto launch --model-kind diffusion`: the Diffusers pipeline and captioned images or clips checked and pinned before
anything starts, and the recipe's train and diffusion sections (the diffusion learner reads both: learners/diffusion)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from yeto.infra.source_pins import local_files, pin_data


def add_arguments(p) -> None:
    p.add_argument("--model-kind", choices=("lm", "diffusion"), default="lm",
                   help="lm: a causal language model (default); diffusion: LoRA on a Diffusers pipeline's denoiser, "
                        "--data a folder of images (or clips, with --frames) with metadata.jsonl (docs/DIFFUSION.md)")
    p.add_argument("--resolution", type=int, help="diffusion: images resized and center-cropped to this (default 512)")
    p.add_argument("--height", type=int, help="diffusion: media height (default --resolution)")
    p.add_argument("--width", type=int, help="diffusion: media width (default --resolution)")
    p.add_argument("--frames", type=int, help="diffusion: frames sampled from each clip (default 1: images; a video "
                                              "family such as LTX-Video takes clips: docs/DIFFUSION.md)")


def check_media(args) -> dict[str, Any]:
    """Every row read as the learners will (the diffusion data contract); the launch's data check record."""
    from yeto.learners.diffusion.api import clip_errors, read_media
    report = read_media(args.data)
    if not report.ok:
        raise ValueError(f"--data {args.data} is not usable images with captions:\n  " + "\n  ".join(report.bad_rows[:20]))
    kinds: dict[str, int] = {}
    for item in report.items:
        kinds[item.kind] = kinds.get(item.kind, 0) + 1
    if (args.frames or 1) > 1 and (bad := clip_errors(report.items, args.frames)):
        raise ValueError(f"--data {args.data}: {len(bad)} bad clip row(s):\n  " + "\n  ".join(bad[:20]))
    if (args.frames or 1) == 1 and set(kinds) != {"image"}:
        raise ValueError(f"--data {args.data}: {kinds.get('video', 0)} video row(s): give --frames N to train on "
                         "clips (docs/DIFFUSION.md)")
    rows = json.dumps([[i.path and Path(i.path).name, i.caption] for i in report.items]).encode()
    return {"source": args.data, "revision": None, "fingerprint": hashlib.sha256(rows).hexdigest(),
            "num_rows": report.num_rows, "num_bad": 0, "data_format": "diffusion", "on_bad_rows": args.on_bad_rows,
            "formats": kinds}


def pin_pipeline(model: str) -> dict[str, Any]:
    """A local pipeline folder pinned by every file's sha256 (its components live in subfolders); a Hub id by name."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return {"id": model, "revision": None, "files": {}}
    if not (path / "model_index.json").is_file():
        raise ValueError(f"--model {model}: no model_index.json; --model-kind diffusion takes a Diffusers pipeline "
                         "folder (or Hub id)")
    return {"id": model, "revision": None, "files": local_files(path, model=False)}


def sections(args, train: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(train section with pins, diffusion section), checked as the learners will read them."""
    from yeto.learners.diffusion.api import DiffusionRecipe, family_of
    train = {**train, "pins": {"base": pin_pipeline(args.model), "data": pin_data(args.data, None)}}
    diffusion = {k: getattr(args, k) for k in ("resolution", "height", "width", "frames") if getattr(args, k) is not None}
    DiffusionRecipe.from_dict({**train, **diffusion})    # ValueError names a bad setting before anything starts
    if Path(args.model).expanduser().is_dir():           # a pipeline the learner cannot train, refused by name here
        family = family_of(str(Path(args.model).expanduser()))
        if not family.video and (args.frames or 1) > 1:
            raise ValueError(f"--frames {args.frames}: {family.name} is an image family (frames 1)")
    return train, diffusion
