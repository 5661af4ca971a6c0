"""The Megatron-Core learner process: `python -m yeto.learners.megatron --run-id R --learner L --recipe recipe.json ...`.

The learner contract and lifecycle of every backend (schemas/learner_contract.py, learners/shell.py); an island's
ranks are its expert-parallel ranks (torchrun or the launcher start one process per rank). The backend is
learners/megatron/backend.py.
"""
from __future__ import annotations

import sys

from yeto.learners import shell
from yeto.learners.megatron.backend import MegatronBackend


def main(argv: list[str] | None = None) -> int:
    return shell.main(MegatronBackend(), argv)


if __name__ == "__main__":
    sys.exit(main())
