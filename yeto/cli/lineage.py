"""`yeto lineage RUN`: the tree of runs resumed and branched from one another around RUN, read from the tape."""
from __future__ import annotations

from yeto.cli.common import run_id_arg
from yeto.cli.run_ids import check_run
from yeto.cli.sql import tape_query

LINEAGE_SQL = "SELECT run_id, kind, parent_run, start_step FROM lineage ORDER BY seq"


def register(sub) -> None:
    p = sub.add_parser("lineage", help="the runs a run was resumed or branched from, and those made from it",
                       description="The lineage tree around RUN from the tape's RunResumed / RunBranched events "
                                   "(the `lineage` SQL view): its ancestors down to it, and its descendants.")
    p.add_argument("run", type=run_id_arg, help="run id")
    p.set_defaults(func=cmd_lineage)


def tree(edges: list[tuple[str, str, str, int | None]], run: str) -> list[str]:
    """Lines of the tree of the lineage's root that holds `run`: each child under its parent, with how it was
    made; `run` is marked. Edges are (run, kind, parent, start_step) in tape order; a run has one parent."""
    parent = {child: (kind, up, step) for child, kind, up, step in edges}
    children: dict[str, list[str]] = {}
    for child, _, up, _ in edges:
        children.setdefault(up, []).append(child)
    root, seen = run, {run}
    while root in parent and parent[root][1] not in seen:      # a cycle cannot happen, but never loop
        root = parent[root][1]
        seen.add(root)

    def label(name: str) -> str:
        how = ""
        if name in parent:
            kind, _, step = parent[name]
            how = f"  ({kind}d at step {step})" if kind == "resume" else f"  ({kind}ed)"
        return name + how + ("   <- this run" if name == run else "")

    lines = [label(root)]

    def walk(name: str, indent: str) -> None:
        kids = children.get(name, [])
        for i, kid in enumerate(kids):
            last = i == len(kids) - 1
            lines.append(f"{indent}{'└─ ' if last else '├─ '}{label(kid)}")
            walk(kid, indent + ("   " if last else "│  "))

    walk(root, "")
    return lines


def cmd_lineage(args) -> int:
    check_run(args, args.run)
    rows = tape_query(args, LINEAGE_SQL)["rows"]
    print("\n".join(tree([tuple(r) for r in rows], args.run)))
    return 0
