"""The artifact's model card (README.md, huggingface_hub's ModelCard): the Hub metadata (library, base model, tags)
and, for a reader, how to load it (offline too: card_offline.py), the base, data, recipe, islands, rounds, final
losses and Yeto version; and the base's Hub id."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from yeto.infra.model_source import SMOLLM2_ALIASES, SMOLLM2_HF_ID, resolve, resolve_model
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.schemas.train_section import TrainSection
from yeto.services.finalizer.card_offline import offline_section

CARD_FILE = "README.md"
TAGS = ["yeto", "diloco", "lora"]


def hub_id(model: str) -> str | None:
    """The Hub id `--model` stands for (an alias's id, not the local .gguf it may load from); None: a local model."""
    if model.lower() in SMOLLM2_ALIASES:
        return SMOLLM2_HF_ID
    if resolve(model).is_local or model.endswith(".gguf"):
        return None
    return resolve_model(model).hf_id


def _hub_dataset(source: str | None) -> str | None:
    """A data source that is a Hub dataset id (`org/name`, without its `@revision`), else None."""
    name = (source or "").split("@", 1)[0]
    return name if name.count("/") == 1 and "://" not in name and not Path(name).exists() else None


def _rows(pairs: list[tuple[str, Any]]) -> str:
    rows = "".join(f"| {k} | {v} |\n" for k, v in pairs if v not in (None, "", [], {}))
    return "| | |\n|---|---|\n" + rows if rows else "not recorded\n"


def _recipe(train: TrainSection, kind: str) -> str:
    given = train.model_fields_set      # a hand-written recipe's card shows what it gave
    pairs: list[tuple[str, Any]] = [("tuning", train.tuning if "tuning" in given else "lora" if kind == "adapter" else "full")]
    if kind == "adapter":
        pairs += [("LoRA r / alpha / dropout", f"{train.lora_r} / {train.lora_alpha} / {train.lora_dropout}"),
                  ("target modules", ", ".join(train.target_modules) or "the learner's default")]
    pairs += [(k, getattr(train, k) if k in given else None)
              for k in ("lr", "schedule", "warmup_steps", "weight_decay", "max_steps", "seq_len", "micro_batch",
                        "grad_accum", "seed", "base_quantization")]
    return _rows(pairs)


def _fleet(fleet: list[dict[str, Any]]) -> str:
    head = "| island | cloud | hardware | region | spot | generations |\n|---|---|---|---|---|---|\n"
    return head + "".join(f"| {i.get('island')} | {i.get('cloud')} | {i.get('count') or 1}× {i.get('gpu')} | "
                          f"{i.get('region') or '-'} | {bool(i.get('spot'))} | {i.get('generations', 1)} |\n"
                          for i in fleet) if fleet else "not recorded\n"


def _losses(run: dict[str, Any]) -> str:
    steps, train, held = (run.get(k) or {} for k in ("learner_steps", "learner_losses", "learner_eval_losses"))
    names = sorted({*steps, *train, *held})
    if not names:
        return "No learner reported progress.\n"
    head = "| learner | steps | last train loss |" + (" last eval loss |" if held else "")
    rows = "".join(f"| {n} | {steps.get(n, '-')} | {_num(train.get(n))} |" + (f" {_num(held.get(n))} |" if held else "")
                   + "\n" for n in names)
    return head + "\n|---|---|---|" + ("---|" if held else "") + "\n" + rows


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def model_card(*, run_id: str, kind: str, recipe: dict[str, Any] | LaunchRecipe, provenance: dict[str, Any],
               run: dict[str, Any]):
    """The card of an artifact of `kind` adapter or full; `provenance` is the manifest's, `run` the finalizer's
    summary (fleet, rounds, steps, losses)."""
    from huggingface_hub import ModelCard, ModelCardData

    train, data, yeto = LaunchRecipe.upcast(recipe).train, provenance.get("data", {}), provenance.get("yeto", {})
    base_id, base = hub_id(train.model), provenance.get("base", {})
    dataset = _hub_dataset(data.get("source"))
    meta = ModelCardData(library_name="peft" if kind == "adapter" else "transformers", base_model=base_id,
                         tags=TAGS, datasets=[dataset] if dataset else None, pipeline_tag="text-generation")
    loader = "peft import AutoPeftModelForCausalLM" if kind == "adapter" else "transformers import AutoModelForCausalLM"
    source = resolve(train.model)
    gguf = source.gguf_file
    base_line = (f"[{base_id}](https://huggingface.co/{base_id}), " + (
        f"revision `{base.get('revision')}`" if base.get("revision") else "revision not pinned") + (
        f"; trained over its GGUF copy `{gguf}`, dequantized: close to the Hub's weights, not identical" if gguf else "")
                 if base_id else f"the local model `{train.model}` (no Hub id: loading this {kind} needs that "
                 "path on the machine that loads it)")
    body = f"""
# {run_id}: {"a LoRA adapter of" if kind == "adapter" else "a full fine-tune of"} {base_id or train.model}

Trained by Yeto with DiLoCo across {len(run.get('fleet', []))} island(s).
This folder is the `artifact/` of the run's output folder (`<output>` below): all you deploy. Beside it, `<output>`
holds `manifest.json` (every file's sha256 and the full provenance), `manifest.sig` signing it
(`yeto verify <output>`) and `resume/`, the state `yeto launch --resume-from` continues from. An `hf://` output's
repo is this folder, with the manifest and its signature.

```python
from {loader}
model = {loader.rsplit(' ', 1)[-1]}.from_pretrained("<output>/artifact")   # or the Hub repo's id
```

{offline_section(kind=kind, model=train.model, base_id=base_id, revision=base.get("revision"), source=source)}## Base model

{base_line}

## Data

{_rows([("source", data.get("source")), ("revision", data.get("revision")), ("fingerprint", data.get("fingerprint")),
        ("rows used", data.get("rows_used")), ("bad rows skipped", data.get("bad_rows_skipped"))])}
## Recipe

{_recipe(train, kind)}
## Islands

{_fleet(run.get("fleet", []))}
## Training

Rounds merged: {run.get("rounds_merged", 0)}.

{_losses(run)}
## Yeto

Version {yeto.get("version")}, commit {yeto.get("git_commit") or "-"}, package sha256 {yeto.get("package_sha256")}.
"""
    return ModelCard(f"---\n{meta.to_yaml()}\n---\n{body}")
