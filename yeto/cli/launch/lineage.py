"""`yeto launch --resume-from / --branch-from RUN|ARTIFACT`: find the parent artifact, refuse a mismatch before
anything starts (schemas/lineage.py compares), and point the new run at the parent (its syncer seeds θ, and for a
resume the outer momentum, from the artifact; its learners continue the step count, schedule and data position)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from yeto.cli.common import conf
from yeto.cli.output_folder import manifest_folder
from yeto.infra.head.records import HEAD_STATE
from yeto.infra.run_paths import run_path
from yeto.schemas.artifact_layout import DEPLOY, RESUME
from yeto.schemas.base import check_run_id
from yeto.schemas.commands import LaunchRun
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.lineage import RunBranched, RunResumed, compare, key_of, refusal, tokenizer_digests


def add_arguments(p) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--resume-from", metavar="RUN|ARTIFACT",
                       help="continue a run's lineage (θ, outer momentum, steps, schedule, data position): only "
                            "--max-steps (the lineage's total), limits and --gpu may change; checked before renting")
    group.add_argument("--branch-from", metavar="RUN|ARTIFACT",
                       help="start a new lineage from a run's adapter weights (fresh outer momentum, any data and recipe)")


def find_artifact(target: str, state_dir: Path) -> Path:
    """A run's output folder (with manifest.json) as given, or the one the finalizer wrote for run `target`; its
    `artifact/` given names the folder above it (schemas/artifact_layout.py)."""
    given = manifest_folder(Path(target).expanduser())
    if (given / "manifest.json").is_file():
        return given.resolve()
    try:
        check_run_id(target)
    except ValueError:
        raise ValueError(f"{target}: neither an artifact directory with manifest.json nor a run id") from None
    folder = run_path(state_dir, target, "artifact")
    if not (folder / "manifest.json").is_file():
        raise ValueError(f"run {target} has no artifact at {folder} (not finalized here? a cloud run: `yeto pull "
                         f"{target}` first); or pass the artifact directory itself")
    return folder.resolve()


def child_key(recipe: LaunchRecipe) -> dict[str, Any]:
    """The new launch's lineage key; the tokenizer is compared when it is at hand (a local model), else the base's
    id, pinned revision and files stand for it (no download before renting)."""
    from yeto.infra.model_source import resolve

    source = resolve(recipe.train.model)
    digests: tuple[str | None, str | None] = (None, None)
    if source.is_local:
        from yeto.learners.torch.api import load_tokenizer
        digests = tokenizer_digests(load_tokenizer(source))
    return key_of(recipe, tokenizer_sha256=digests[0], chat_template_sha256=digests[1])


def parent_key(manifest: dict[str, Any]) -> dict[str, Any]:
    """The parent's lineage key, its base named as the user gave it: a cloud run's head keyed a local model by the
    copy it was shipped (launch_cloud.ship), and the provenance's pin keeps the name typed at launch."""
    key = manifest["resume"]["key"]
    if str(key.get("base_model") or "").startswith(f"{HEAD_STATE}/model/"):
        return {**key, "base_model": manifest.get("provenance", {}).get("base", {}).get("id", key["base_model"])}
    return key


def apply(args, launch: LaunchRun) -> tuple[LaunchRun, list]:
    """The launch pointed at its parent, and the lineage event to publish with it; ValueError on any mismatch."""
    kind: Literal["resume", "branch"] | None = \
        "resume" if getattr(args, "resume_from", None) else "branch" if getattr(args, "branch_from", None) else None
    if kind is None:
        return launch, []
    target = args.resume_from or args.branch_from
    folder = find_artifact(target, Path(conf(args).state_dir))
    text = (folder / "manifest.json").read_bytes()
    manifest, resume = json.loads(text), json.loads(text).get("resume")
    parent = manifest.get("run_id", target)
    if not resume or not resume.get("files"):
        raise ValueError(f"--{kind}-from {target}: {folder} carries no resume state ({RESUME}/frag-*.safetensors): "
                         f"an artifact written before Yeto kept it, or a merged model; train a new run instead")
    if absent := [name for name in resume["files"] if not (folder / name).is_file()]:
        raise ValueError(f"--{kind}-from {target}: {folder} lacks {absent[0]} that its manifest names (a copy of "
                         f"{DEPLOY}/ alone, such as an hf:// repo's download, holds no resume state); pass the run's "
                         f"output folder (<state>/runs/RUN/artifact, or `yeto pull RUN` first)")
    recipe = LaunchRecipe.upcast(launch.recipe)
    train = recipe.train
    if mismatches := compare(parent_key(manifest), child_key(recipe), kind):
        raise ValueError(refusal(mismatches, kind, parent))
    start = int(resume.get("start_step", 0)) if kind == "resume" else 0
    if kind == "resume" and train.max_steps <= start:
        raise ValueError(f"--resume-from {parent}: --max-steps {train.max_steps} is the lineage's total and the "
                         f"parent stopped at step {start}; pass a larger --max-steps")
    # A cloud run's head gets a copy of the parent (yeto/cli/launch/cloud.py ships it and renames the seed)
    sync = {**train.sync.model_dump(), "seed": str(folder), "seed_momentum": kind == "resume"}
    recipe = recipe.updated(train={"sync": sync, "start_step": start})
    sha = hashlib.sha256(text).hexdigest()
    fields = dict(parent_run=parent, parent_artifact=str(folder), parent_artifact_sha256=sha, source="cli")
    event = (launch.caused(RunResumed, parent, start_step=start, **fields) if kind == "resume"
             else launch.caused(RunBranched, parent, **fields))
    return launch.model_copy(update={"recipe": recipe.wire()}), [event]
