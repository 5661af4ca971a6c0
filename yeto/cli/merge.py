"""`yeto merge`: fold a LoRA adapter into its base and write deployment-ready sharded SafeTensors, safely.

Safely means: the adapter's manifest hashes are checked (files changed since the run wrote them are
refused), the base is the one the run trained on (another needs --base and --force), and the merged
model's logits on a probe are compared with base+adapter before anything is written.
"""
from __future__ import annotations

import json
from pathlib import Path

from yeto.services.finalizer.api import sha256_file

PROBE = "Yeto merges adapters into their base model."


def register(sub) -> None:
    p = sub.add_parser("merge", help="fold a LoRA adapter into its base; write sharded SafeTensors",
                       description=__doc__.splitlines()[0])
    p.add_argument("adapter", help="the adapter directory (a run's artifact: adapter_config.json + adapter_model.safetensors)")
    p.add_argument("--out", required=True, help="directory for the merged model (must not exist or be empty)")
    p.add_argument("--base", default=None, help="base model (alias, HF id, directory or .gguf); default: the manifest's")
    p.add_argument("--force", action="store_true", help="merge into a --base other than the one the run trained on")
    p.add_argument("--max-shard-size", default="2GB", help="largest safetensors shard, e.g. 500MB, 2GB (default 2GB)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32", help="dtype of the written weights")
    p.set_defaults(func=cmd_merge)


def check_manifest(adapter: Path) -> dict:
    path = adapter / "manifest.json"
    if not path.exists():
        return {}
    manifest = json.loads(path.read_text())
    changed = [f for f, sha in manifest.get("files", {}).items() if not (adapter / f).exists() or sha256_file(adapter / f) != sha]
    if changed:
        raise ValueError(f"{adapter}: {', '.join(changed)} changed since the run wrote the artifact (manifest hashes "
                         f"differ); merge the original files")
    return manifest


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
    import torch
    from peft import PeftModel

    from yeto.infra.model_source import resolve
    from yeto.learners.torch.api import load_model, load_tokenizer

    adapter, out = Path(args.adapter), Path(args.out)
    if not (adapter / "adapter_config.json").exists():
        raise ValueError(f"{adapter} is not a LoRA adapter directory (no adapter_config.json)")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not empty; pick a new --out")
    manifest = check_manifest(adapter)
    source = resolve(pick_base(args, manifest))
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
    merged = merged.to(getattr(torch, args.dtype))
    merged.save_pretrained(str(out), max_shard_size=args.max_shard_size, safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    files = sorted(p.name for p in out.iterdir())
    (out / "merge_manifest.json").write_text(json.dumps({
        "adapter": str(adapter), "base": source.location, "dtype": args.dtype, "probe_max_abs_error": err,
        "adapter_manifest_run": manifest.get("run_id"), "files": {f: sha256_file(out / f) for f in files}}, indent=2))
    shards = [f for f in files if f.endswith(".safetensors")]
    print(f"merged {adapter} into {source.location}: {len(shards)} shard(s) in {out} (probe error {err:.2e})")
    return 0
