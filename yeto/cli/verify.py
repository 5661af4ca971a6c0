"""`yeto verify ARTIFACT`: check the manifest's signature and every file's sha256, then say what the manifest records.

Exit 0 when the signature and every hash check out; 1 naming each changed, missing or added file, an unsigned
manifest, a bad signature or another signer than --key. What this proves and what it does not: docs/PROVENANCE.md.
The manifest signs both folders of a run's output folder (schemas/artifact_layout.py); `<output>/artifact` given
checks the output folder above it, and a copy of `artifact/` alone (an hf:// repo's download) checks its files,
the resume state the manifest names being absent by design (`not_here`).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from yeto.cli.output_folder import manifest_folder, placed
from yeto.infra.signing import SIG_FILE, signature_ok
from yeto.schemas.artifact_layout import DEPLOY, RESUME, deploy_copy_names, is_resume_file
from yeto.schemas.launch_recipe import LaunchRecipe
from yeto.services.finalizer.api import sha256_file

MANIFEST = "manifest.json"


def register(sub) -> None:
    p = sub.add_parser("verify", help="check an artifact's signature and file hashes; show its provenance",
                       description=__doc__.splitlines()[0])
    p.add_argument("artifact", help="a run's output folder (manifest.json, manifest.sig, artifact/, resume/), its "
                                    "artifact/, or a download of an hf:// output's repo")
    p.add_argument("--key", default=None, help="require this signer (hex public key), e.g. the signer_public_key of "
                                               "the run's ArtifactWritten on its tape")
    p.add_argument("--json", action="store_true", help="print the verdict and the manifest's provenance as JSON")
    p.set_defaults(func=cmd_verify)


@dataclass
class Verdict:
    """What `yeto verify` found: files that differ from the manifest, and the signature's state."""

    changed: list[str] = field(default_factory=list)
    """Files the manifest names whose sha256 differs, or that are missing (with why)."""
    extra: list[str] = field(default_factory=list)
    """Files in the folder that the manifest does not name."""
    not_here: list[str] = field(default_factory=list)
    """Names the manifest signs that a copy of `artifact/` alone leaves out by design: the resume state."""
    signature: str = "ok"
    """ok | unsigned | bad (manifest.json or manifest.sig changed) | missing (no manifest.sig) | other-key"""
    signer: str = ""

    @property
    def problems(self) -> list[str]:
        why = {"unsigned": f"{MANIFEST}: not signed (written before manifest v2, or without a stack key)",
               "bad": f"{MANIFEST}: the signature does not match (manifest.json or {SIG_FILE} changed)",
               "missing": f"{SIG_FILE}: missing (the manifest names a signer)",
               "other-key": f"{MANIFEST}: signed by {self.signer}, not by the --key given"}
        return self.changed + [f"{name}: not in the manifest (added after the run wrote it)" for name in self.extra] + (
            [why[self.signature]] if self.signature in why else [])


def check_artifact(folder: Path, *, key: str | None = None) -> tuple[dict, Verdict]:
    """(the manifest, the verdict) of an artifact folder; ValueError when there is no manifest to check against."""
    try:
        raw = (folder / MANIFEST).read_bytes()
        manifest = json.loads(raw)
    except (OSError, ValueError) as e:
        raise ValueError(f"{folder}: no readable {MANIFEST} ({type(e).__name__}); pass a Yeto artifact folder") from None
    verdict, files = Verdict(signer=manifest.get("signer_public_key", "")), manifest.get("files", {})
    where, verdict.not_here = placed(folder, files)
    for name, sha in sorted(files.items()):
        if name in verdict.not_here:
            continue
        here = where.get(name, name)
        if not (folder / here).is_file():
            verdict.changed.append(f"{here}: missing")
        elif (got := sha256_file(folder / here)) != sha:
            verdict.changed.append(f"{here}: changed (sha256 {got[:12]}, the manifest says {sha[:12]})")
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    hub = {n for n in present if n == ".gitattributes" or n.startswith(".cache/huggingface/")} if where else set()
    verdict.extra = sorted(present - {where.get(n, n) for n in files} - {MANIFEST, SIG_FILE} - hub)
    if not verdict.signer:
        verdict.signature = "unsigned"
    elif not (folder / SIG_FILE).is_file():
        verdict.signature = "missing"
    elif not signature_ok(verdict.signer, raw, (folder / SIG_FILE).read_text()):
        verdict.signature = "bad"
    elif key is not None and key.strip().lower() != verdict.signer.lower():
        verdict.signature = "other-key"
    return manifest, verdict


def summary(manifest: dict) -> list[str]:
    """What the manifest records, one line each (docs/PROVENANCE.md says what that proves)."""
    prov, train, why = manifest.get("provenance", {}), None, ""
    try:
        train = LaunchRecipe.upcast(manifest.get("recipe", {})).train
    except ValueError as e:     # a recipe this Yeto cannot read (a newer one's): the rest of the summary holds
        why = str(e)
    base, data, code = prov.get("base", {}), prov.get("data") or manifest.get("data", {}), prov.get("yeto", {})
    files = manifest.get("files", {})
    resume = sum(is_resume_file(n) for n in files)
    lines = [f"artifact: {manifest.get('kind')} of run {manifest.get('run_id')}, {len(files)} files"
             + (f" signed ({len(files) - resume} in {DEPLOY}/, {resume} in {RESUME}/)" if deploy_copy_names(files) else ""),
             f"base:     {base.get('id', manifest.get('base_model'))} revision {base.get('revision') or '-'} "
             f"({len(base.get('files', {}))} files by sha256)",
             f"data:     {data.get('source')} revision {data.get('revision') or '-'} fingerprint "
             f"{(data.get('fingerprint') or '-')[:16]}, {data.get('rows_used')} rows used, "
             f"{data.get('bad_rows_skipped')} bad rows skipped",
             f"recipe:   {train.tuning} r={train.lora_r} lr={train.lr} max_steps={train.max_steps} "
             f"seq_len={train.seq_len} seed={train.seed}" if train is not None else f"recipe:   not readable ({why})",
             "fleet:    " + (", ".join(f"{i.get('cloud')}:{i.get('count')}x{i.get('gpu')} ({i.get('generations')} gen)"
                                        for i in prov.get("fleet", [])) or "-"),
             f"rounds:   {prov.get('rounds_merged')} merged",
             f"yeto:     {code.get('version')} commit {code.get('git_commit') or '-'}"
             f"{' (+ local changes)' if code.get('git_dirty') else ''} package {(code.get('package_sha256') or '-')[:16]}",
             "libs:     " + (", ".join(f"{k} {v}" for k, v in prov.get("libraries", {}).items() if v) or "-"),
             f"signer:   {manifest.get('signer_public_key') or '- (unsigned)'}"]
    if merge := manifest.get("merge"):
        lines.append(f"merge:    of the artifact whose manifest has sha256 {merge.get('source_manifest_sha256')}")
    return lines


def cmd_verify(args) -> int:
    folder = manifest_folder(Path(args.artifact))
    manifest, verdict = check_artifact(folder, key=args.key)
    if args.json:
        print(json.dumps({"ok": not verdict.problems, "problems": verdict.problems, "folder": str(folder), **asdict(verdict),
                          "provenance": manifest.get("provenance", {}), "merge": manifest.get("merge")}, indent=2))
    else:
        print("\n".join(summary(manifest)))
        if folder != Path(args.artifact):
            print(f"checked:  the output folder {folder}, whose manifest signs {args.artifact} and {RESUME}/")
        if verdict.not_here:    # a copy of artifact/ alone (output_folder.placed)
            print(f"checked:  a copy of {DEPLOY}/ alone (an hf:// repo's files); the {len(verdict.not_here)} resume "
                  f"file(s) the manifest signs stay in the run's output folder")
        print("\n".join(f"FAILED {p}" for p in verdict.problems) or "verified: the signature and every file's sha256 match")
    return 1 if verdict.problems else 0
