#!/usr/bin/env bash
# Run a command against a frozen copy of a commit (long benchmarks, full test runs) while this tree is edited.
#   scripts/frozen.sh <commit> <dir> <command...>     e.g. scripts/frozen.sh HEAD /tmp/frozen python -m pytest -q tests
# The venv's editable install points at this tree, so the copy gets its own `yeto.*` through a link tree
# (scripts/link_packages.py) that a sitecustomize puts first, in this process and every child it starts.
set -euo pipefail
commit=$1 dir=$2; shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$dir" ] || git -C "$here" worktree add -q --detach "$dir" "$commit"
py="$here/.venv/bin/python"
(cd "$dir" && "$py" scripts/link_packages.py)
mkdir -p "$dir/build/site"
cat > "$dir/build/site/sitecustomize.py" <<'PY'
"""Frozen copy: `yeto.*` from $YETO_LINKS, not from the editable finder of the tree the venv was made from."""
import os
import sys

sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(type(f), "__name__", "").lower()
                    and "editable" not in getattr(f, "__name__", "").lower()]
sys.path.insert(0, os.environ["YETO_LINKS"])
import yeto  # noqa: E402,F401  (cached now: a `yeto/` folder in the working directory cannot shadow it)

del sys.path[0]
PY
cd "$dir"
export YETO_LINKS="$dir/build/links" PYTHONPATH="$dir/build/site${PYTHONPATH:+:$PYTHONPATH}" PATH="$here/.venv/bin:$PATH"
exec "$@"
