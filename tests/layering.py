"""The layering rules of DESIGN.md over the import graph: who may import whom, checked on any tree's root.

schemas <- infra <- services/<x> (own package only); learners import schemas and learners (the bus only through
the learner transport); the CLI (`yeto/`) reaches services and learners only through their public faces.
benchmarks/ is a clean room: it reaches Yeto only through public faces too (see BENCH_FACES), and edits no sys.path.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from import_graph import imports, modules, script_imports


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(module: str) -> str:
    """schemas, infra, services.<name>, learners, or cli (the `yeto/` folder)."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("schemas", "infra", "learners"):
        return parts[1]
    if len(parts) > 2 and parts[1] == "services":
        return f"services.{parts[2]}"
    return "services" if parts[1:2] == ["services"] else "cli"


# What each layer may import of Yeto. The CLI reaches services and learners only through their public faces.
# (The syncer's face, services/syncer/api.py, is not one of them: the CLI never needs the syncer.)
FACES = ("yeto.services.planner.api", "yeto.services.launcher.api", "yeto.services.finalizer.api",
         "yeto.services.planner.estimate", "yeto.learners.torch.api", "yeto.learners.data", "yeto.learners.diffusion.api",
         "yeto.learners.lm_recipe")   # the LM recipe record alone: `yeto launch` builds it without importing torch
TRANSPORT = ("yeto.learners.bus_client", "yeto.learners.transport")   # the learners' one door to the bus
# Edges every layer above infra reads (a --model on disk, its pin, a GGUF's tokenizer read once and kept: the learners
# load it, the finalizer writes it into the artifact; a GGUF's metadata read faster wherever transformers reads one).
SHARED_EDGES = ("yeto.infra.model_source", "yeto.infra.source_pins", "yeto.infra.gguf_cache", "yeto.infra.gguf_header",
                "yeto.infra.gguf_tokenizer", "yeto.infra.gguf_reads")
# What benchmarks/ may import of Yeto, besides yeto.schemas (the contract, the learner's command line included): the
# CLI's faces, the syncer's and the learners' backbone (faces the CLI never needs, so not in FACES), the CLI itself
# (what `yeto launch` would publish), and the infra rooms a benchmark runs for real: the bus, one nats-server, the
# local stack and the tape writer.
BENCH_FACES = (*FACES, "yeto.services.syncer.api", "yeto.learners.api")
BENCH_ROOMS = ("yeto.cli", "yeto.infra.bus", "yeto.infra.nats.server", "yeto.infra.stack", "yeto.infra.tape")
BENCHMARKS = "benchmarks"
_PATH_EDIT = re.compile(r"sys\.path\s*(\.\w+\(|\[|\+?=)")   # in a `python -c` string: sys.path.insert(, sys.path[0] =, ...


def allowed(source: str, target: str) -> bool:
    layer = layer_of(source)
    if _under(target, "yeto.schemas"):
        return True
    if layer == "schemas":
        return False
    if _under(target, "yeto.infra"):
        return layer != "learners" or any(_under(source, t) for t in TRANSPORT) or target in SHARED_EDGES
    if layer == "infra":
        return False
    if layer.startswith("services"):
        return _under(target, f"yeto.{layer}")
    if layer == "learners":
        return _under(target, "yeto.learners")
    if _under(target, "yeto.services") or _under(target, "yeto.learners"):
        return target in FACES
    return True


def layer_violations(root: Path) -> list[str]:
    """Imports of Yeto modules that the layering forbids (see `allowed`)."""
    return [f"{i} ({layer_of(i.source)} may not)" for i in imports(root)
            if _under(i.target, "yeto") and i.target != "yeto" and not allowed(i.source, i.target)]


def bench_allowed(target: str) -> bool:
    return (_under(target, "yeto.schemas") or target in BENCH_FACES or target in SHARED_EDGES
            or any(_under(target, r) for r in BENCH_ROOMS))


def bench_violations(root: Path) -> list[str]:
    """Imports in benchmarks/ of Yeto modules that are not a public face (see BENCH_FACES, BENCH_ROOMS)."""
    return [f"{i} (benchmarks reach Yeto through its faces)" for i in script_imports(root, BENCHMARKS)
            if _under(i.target, "yeto") and i.target != "yeto" and not bench_allowed(i.target)]


def path_edits(root: Path) -> list[str]:
    """Places in benchmarks/ that touch `sys.path` (an edit, or a `python -c` string doing one): a benchmark reaches
    its siblings as a script's folder and Yeto as an installed package, never by stitching folders together."""
    found = []
    for path in sorted((root / BENCHMARKS).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                    and node.value.id == "sys") or (isinstance(node, ast.Constant) and isinstance(node.value, str)
                                                     and _PATH_EDIT.search(node.value)):
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} touches sys.path")
    return found


def missing_names(root: Path) -> list[str]:
    """Modules FACES, TRANSPORT, SHARED_EDGES, BENCH_FACES and BENCH_ROOMS name that the tree lacks: a stale name would
    quietly allow the next module given it, unreviewed."""
    known = modules(root)
    named = dict.fromkeys((*FACES, *TRANSPORT, *SHARED_EDGES, *BENCH_FACES, *BENCH_ROOMS))
    return [f"{name}: named in layering.py, but there is no such module" for name in named if name not in known]
