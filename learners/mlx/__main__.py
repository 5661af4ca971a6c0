"""The MLX learner process: `python -m yeto.learners.mlx --run-id R --learner L --recipe recipe.json ...`.

The learner contract and lifecycle of every backend (schemas/learner_contract.py, learners/shell.py); an MLX island
is one process. The backend is learners/mlx/backend.py.
"""
from __future__ import annotations

import sys

from yeto.learners import shell
from yeto.learners.mlx.backend import MlxBackend


def main(argv: list[str] | None = None) -> int:
    return shell.main(MlxBackend(), argv)


if __name__ == "__main__":
    sys.exit(main())
