"""Lineage of runs: RunResumed / RunBranched, and the pure strict-resume comparison of a parent and a child.

A resume continues one lineage (θ, outer momentum, step count, schedule and data position), so everything that
shapes the parameters, the data order or the optimizers must be the parent's; only limits, the schedule's end
(`max_steps`) and the fleet may change. A branch starts a new lineage from the parent's weights: only what the
weights depend on (base, tokenizer, LoRA, fragment layout) must match. Nothing here does I/O.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from yeto.schemas.base import Event, registry
from yeto.schemas.launch_recipe import LaunchRecipe

# Train-recipe fields a resume may change: the schedule's end (and so the lineage's total steps), how an island
# lays out its memory (the fleet's business: the same numbers either way), held-out evaluation (it never
# touches the weights), and what a bad row does (the data itself is pinned by its fingerprint).
# How an island's ranks hold the model (shard, tensor_parallel) is safe to change: fragments and resume state use the
# checkpoint's own names, whatever the split.
SAFE_TRAIN = frozenset({"max_steps", "shard", "tensor_parallel", "activation_checkpointing", "eval_every", "eval_data",
                        "on_bad_rows"})
# Train fields keyed elsewhere: the base by name and pins, the data by its fingerprint; the resume's own start step.
NOT_KEYED = frozenset({"model", "data", "pins", "start_step"})
# Sync settings that shape θ and the outer momentum a resume carries on (the rest is fleet tuning: safe).
STRICT_SYNC = ("num_fragments", "outer_lr", "momentum", "merge")
# What the parent's weights depend on: a branch must keep these too (`train.*` names are recipe fields).
WEIGHT_FIELDS = ("base_model", "base_revision", "base_files", "tokenizer_sha256", "chat_template_sha256", "train.tuning",
                 "train.lora_r", "train.lora_alpha", "train.target_modules", "sync.num_fragments")


@registry.register
class RunResumed(Event):
    """This run continues `parent_run`'s lineage from its artifact (θ, outer momentum, steps, data position)."""

    type: Literal["RunResumed"] = "RunResumed"
    version: Literal[1] = 1
    parent_run: str
    parent_artifact: str                # the artifact directory resumed from
    parent_artifact_sha256: str         # sha256 of its manifest.json
    start_step: int = 0                 # the step the learners continue from


@registry.register
class RunBranched(Event):
    """This run starts a new lineage from `parent_run`'s adapter weights (fresh outer momentum, any data)."""

    type: Literal["RunBranched"] = "RunBranched"
    version: Literal[1] = 1
    parent_run: str
    parent_artifact: str
    parent_artifact_sha256: str


@dataclass(frozen=True)
class Mismatch:
    field: str
    parent: Any
    child: Any


def digest(value: Any) -> str:
    """sha256 of a JSON-able value's canonical text (a tokenizer's vocabulary, a chat template)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def tokenizer_digests(tok: Any) -> tuple[str, str]:
    """(vocabulary sha256, chat template sha256) of a loaded tokenizer: the same on the finalizer and the CLI."""
    return digest(tok.get_vocab()), digest(getattr(tok, "chat_template", None) or "")


def key_of(recipe: dict[str, Any] | LaunchRecipe, *, tokenizer_sha256: str | None,
           chat_template_sha256: str | None) -> dict[str, Any]:
    """What a lineage is pinned to, flat: the base (id, pinned revision, its files' hashes), tokenizer, the data
    fingerprint, every train field the recipe gave, and the strict sync ones (a sync setting not given is its
    default, not unknown)."""
    typed = LaunchRecipe.upcast(recipe)
    train = typed.train.model_dump(mode="json", exclude_unset=True)
    sync = typed.train.sync.config()
    train.pop("sync", None)
    base = (train.pop("pins", {}) or {}).get("base") or {}
    key = {"base_model": train.get("model"), "base_revision": base.get("revision"),
           "base_files": digest(base["files"]) if base.get("files") else None, "tokenizer_sha256": tokenizer_sha256,
           "chat_template_sha256": chat_template_sha256,
           "data_fingerprint": typed.data_check.fingerprint}
    key.update({f"train.{k}": v for k, v in train.items() if k not in NOT_KEYED})
    key.update({f"sync.{k}": getattr(sync, k) for k in STRICT_SYNC})
    return key


def compare(parent: dict[str, Any], child: dict[str, Any], kind: Literal["resume", "branch"]) -> list[Mismatch]:
    """Every field the child may not change, where it differs. A value unknown on either side (None: a tokenizer
    not at hand, a base with no pinned revision) is not compared: the base id and its files then pin it."""
    names = WEIGHT_FIELDS if kind == "branch" else sorted(set(parent) | set(child))
    out = []
    for name in names:
        if kind == "resume" and name.removeprefix("train.") in SAFE_TRAIN:
            continue
        a, b = parent.get(name), child.get(name)
        if a is not None and b is not None and _norm(a) != _norm(b):
            out.append(Mismatch(name, a, b))
    return out


def _norm(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def refusal(mismatches: list[Mismatch], kind: str, parent: str) -> str:
    """The message `yeto launch` refuses with: each field, both values, and what to do."""
    lines = [f"  {m.field}: {parent} has {m.parent!r}, this launch {m.child!r}" for m in mismatches]
    todo = (f"resume with the parent's settings (only --max-steps, limits and --gpu may change), or start a new "
            f"lineage from its weights with --branch-from {parent}" if kind == "resume"
            else "a branch keeps the parent's base model, tokenizer, LoRA and fragment layout (its weights need them); "
                 "use the same --model, --lora-r and --fragments")
    return f"--{kind}-from {parent}: {len(mismatches)} field(s) differ from the parent:\n" + "\n".join(lines) + f"\n{todo}"


EXAMPLES = [
    RunResumed(id="ex-run-resumed", run_id="r-demo-2", parent_run="r-demo", parent_artifact="/home/u/.yeto/runs/r-demo/artifact",
               parent_artifact_sha256="ab" * 32, start_step=200, source="cli"),
    RunBranched(id="ex-run-branched", run_id="r-demo-b", parent_run="r-demo",
                parent_artifact="/home/u/.yeto/runs/r-demo/artifact", parent_artifact_sha256="ab" * 32, source="cli"),
]
