"""The diffusion learner process: `python -m yeto.learners.diffusion --run-id R --learner L --recipe recipe.json ...`.

The learner contract and lifecycle of every backend (schemas/learner_contract.py, learners/shell.py); a diffusion
island is one process. The backend is learners/diffusion/backend.py.
"""
from __future__ import annotations

import sys

from yeto.learners import shell
from yeto.learners.diffusion.backend import DiffusionBackend


def main(argv: list[str] | None = None) -> int:
    return shell.main(DiffusionBackend(), argv)


if __name__ == "__main__":
    # Diffusion bases are never NF4 here: keep bitsandbytes out (peft imports it whenever it is installed:
    # learners/torch/quant.py keep_out_unless).
    from yeto.learners.torch import quant
    quant.keep_out_unless(False)
    sys.exit(main())
