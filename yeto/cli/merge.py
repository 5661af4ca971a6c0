"""`yeto merge`: fold a LoRA adapter into its base and write deployment-ready sharded SafeTensors, safely.

Safely means: the adapter's manifest hashes and signature are checked (files changed since the run wrote them
are refused), the base is the one the run trained on (another needs --base and --force), and the merged
model's logits on a probe are compared with base+adapter before anything is written. The merged model's own
manifest.json carries the adapter's provenance and records the merge; this machine's stack key signs it.
"""
from __future__ import annotations

import json
from pathlib import Path

from yeto.cli.common import state_dir
from yeto.cli.output_folder import locate
from yeto.cli.verify import MANIFEST, check_artifact
from yeto.infra.signing import SIG_FILE, public_hex, sign, stack_key
from yeto.schemas.artifact_layout import DEPLOY
from yeto.services.finalizer.api import code_version, sha256_file

PROBE = "Yeto merges adapters into their base model."
DTYPES = {"auto": None, "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def out_dtype(choice: str, source) -> str:
    """The torch dtype name to write: the named one, or (auto) the base's as its config records it."""
    if (named := DTYPES.get(choice, choice)) is not None:
        return named
    from transformers import AutoConfig

    from yeto.infra import gguf_reads
    gguf_reads.install_for(source)
    config = AutoConfig.from_pretrained(source.location, gguf_file=source.gguf_file, revision=source.revision)
    found = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)   # transformers 5 / 4 name
    return str(found).removeprefix("torch.") if found is not None and source.gguf_file is None else "bfloat16"


def register(sub) -> None:
    p = sub.add_parser("merge", help="fold a LoRA adapter into its base; write sharded SafeTensors",
                       description=__doc__.splitlines()[0])
    p.add_argument("adapter", help="a run's output folder (manifest.json, artifact/ with adapter_config.json and "
                                   "adapter_model.safetensors), its artifact/, or an adapter directory")
    p.add_argument("--out", required=True, help="directory for the merged model (must not exist or be empty)")
    p.add_argument("--base", default=None, help="base model (alias, HF id, directory or .gguf); default: the manifest's")
    p.add_argument("--force", action="store_true", help="merge into a --base other than the one the run trained on")
    p.add_argument("--max-shard-size", default="2GB", help="largest safetensors shard, e.g. 500MB, 2GB (default 2GB)")
    p.add_argument("--dtype", choices=(*DTYPES, "float32", "bfloat16", "float16"), default="auto",
                   help="dtype of the written weights: auto (default) keeps the base's (its config's dtype; bf16 for a .gguf)")
    p.add_argument("--verbose", action="store_true",
                   help="show the libraries' progress bars and deprecation notices (GGUF dequantizing, shard writing)")
    p.set_defaults(func=cmd_merge)


def check_manifest(adapter: Path) -> dict:
    """The adapter's manifest, its files and signature checked (an unsigned one from before manifest v2 passes on
    its hashes); {} when the folder has none."""
    if not (adapter / MANIFEST).exists():
        return {}
    manifest, verdict = check_artifact(adapter)
    if verdict.changed:
        raise ValueError(f"{adapter}: {', '.join(verdict.changed)}: changed since the run wrote the artifact (manifest "
                         f"hashes differ); merge the original files")
    if verdict.signature in ("bad", "missing"):
        raise ValueError(f"{adapter}: {verdict.problems[-1]}; merge the artifact as the run wrote it (`yeto verify`)")
    return manifest


def merged_manifest(args, manifest: dict, adapter: Path, out: Path, base: str, err: float, key) -> dict:
    """The merged model's manifest: the adapter's provenance carried over, and the merge itself recorded."""
    source_sha = sha256_file(adapter / MANIFEST) if manifest else None
    return {"manifest_version": 2, "kind": "merged", "run_id": manifest.get("run_id"), "base_model": base,
            "files": {f: sha256_file(out / f) for f in sorted(p.name for p in out.iterdir())},
            "recipe": manifest.get("recipe", {}), "provenance": manifest.get("provenance", {}),
            "merge": {"source": str(adapter), "source_manifest_sha256": source_sha,
                      "source_signer_public_key": manifest.get("signer_public_key") or None,
                      "base": base, "forced_other_base": bool(args.force and base != manifest.get("base_model")),
                      "dtype": args.dtype, "max_shard_size": args.max_shard_size, "probe_max_abs_error": err,
                      "yeto": code_version()},
            "signer_public_key": public_hex(key)}


def pick_base(args, manifest: dict) -> str:
    recorded = manifest.get("base_model")
    if args.base is None:
        if recorded is None:
            raise ValueError(f"{args.adapter} has no manifest naming its base model: pass --base")
        return recorded
    if recorded is not None and args.base != recorded and not args.force:
        raise ValueError(f"the adapter was trained on {recorded!r}, not {args.base!r}; pass --force to merge anyway")
    return args.base


def cmd_merge(args) -> int:
    from yeto.learners.torch.api import quieted

    with quieted(args.verbose):      # the libraries' bars and notices are not this command's news (errors print)
        return merge(args)


def merge(args) -> int:
    import torch
    from peft import PeftModel

    from yeto.infra.source_pins import pinned_source
    from yeto.learners.torch.api import load_model, load_tokenizer

    (root, adapter), out = locate(Path(args.adapter)), Path(args.out)
    if not (adapter / "adapter_config.json").exists():
        raise ValueError(f"{adapter} is not a LoRA adapter directory (no adapter_config.json, nor {DEPLOY}/ holding one)")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not empty; pick a new --out")
    manifest = check_manifest(root)
    base = pick_base(args, manifest)
    # The run's base at its pinned revision, local files checked against their hashes; --force skips the pin.
    pin = manifest.get("provenance", {}).get("base") if base == manifest.get("base_model") else None
    source = pinned_source(base, pin)
    tokenizer = load_tokenizer(source)
    model = PeftModel.from_pretrained(load_model(source, dtype=torch.float32), str(adapter)).eval()
    probe = tokenizer(PROBE, return_tensors="pt")
    with torch.no_grad():
        expected = model(**probe).logits
        merged = model.merge_and_unload().eval()
        got = merged(**probe).logits
    err = float((got - expected).abs().max())
    if err > 1e-3 * max(1.0, float(expected.abs().max())):
        raise ValueError(f"merging changed the model's outputs by {err:.3g} on a probe; the adapter does not fit this base")
    args.dtype = out_dtype(args.dtype, source)      # recorded by the manifest as the name written
    merged = merged.to(getattr(torch, args.dtype))
    merged.save_pretrained(str(out), max_shard_size=args.max_shard_size, safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    key = stack_key(state_dir(args))      # this machine's stack key signs what it merged (`yeto verify OUT`)
    text = json.dumps(merged_manifest(args, manifest, root, out, base, err, key), indent=2, sort_keys=True)
    (out / MANIFEST).write_text(text)
    (out / SIG_FILE).write_text(sign(key, text.encode()) + "\n")
    files = sorted(p.name for p in out.iterdir())
    shards = [f for f in files if f.endswith(".safetensors")]
    print(f"merged {adapter} into {source.location}: {len(shards)} {args.dtype} shard(s) in {out} (probe error {err:.2e})")
    return 0
