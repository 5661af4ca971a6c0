"""The layering rules of DESIGN.md over the import graph: who may import whom, checked on any tree's root.

schemas <- infra <- services/<x> (own package only); learners import schemas and learners (the bus only through
the learner transport); the CLI (`yeto/`) reaches services and learners only through their public faces.
"""
from __future__ import annotations

from pathlib import Path

from import_graph import imports, modules


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
# (The syncer has no face: the CLI never needs it. A face is added here when one is written.)
FACES = ("yeto.services.planner.api", "yeto.services.launcher.api", "yeto.services.finalizer.api",
         "yeto.learners.torch.api", "yeto.learners.data", "yeto.learners.diffusion.api")
TRANSPORT = ("yeto.learners.bus_client", "yeto.learners.transport")   # the learners' one door to the bus
# Edges every layer above infra reads (a --model on disk, its pin).
SHARED_EDGES = ("yeto.infra.model_source", "yeto.infra.source_pins")


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


def missing_names(root: Path) -> list[str]:
    """Modules FACES, TRANSPORT and SHARED_EDGES name that the tree lacks: a stale name would quietly allow the next
    module given it, unreviewed."""
    known = modules(root)
    return [f"{name}: named in layering.py, but there is no such module" for name in (*FACES, *TRANSPORT, *SHARED_EDGES)
            if name not in known]
