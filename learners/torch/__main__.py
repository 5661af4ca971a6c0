"""The torch learner process: `python -m yeto.learners.torch --run-id R --learner L --recipe recipe.json ...`.

One process per rank of an island; the lifecycle is learners/shell.py's, the backend learners/torch/backend.py.
`--no-sync` trains locally with no NATS at all.
"""
from __future__ import annotations

import contextlib
import io
import sys

from yeto.learners import shell
from yeto.learners.lm_recipe import TrainRecipe
from yeto.learners.torch.backend import TorchBackend


def main(argv: list[str] | None = None) -> int:
    return shell.main(TorchBackend(), argv)


def needs_bitsandbytes(argv: list[str]) -> bool:
    """Whether this learner's recipe quantizes its base (NF4); True when the arguments do not parse (main says why)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):      # main parses again and reports
            args = shell.parse(TorchBackend(), argv)
            return TrainRecipe.from_json(shell.recipe_text(args.recipe)).base_quantization == "nf4"
    except (Exception, SystemExit):  # noqa: BLE001 - any doubt keeps it importable; main reports a bad recipe
        return True


if __name__ == "__main__":
    # A process of its own: keeping bitsandbytes out here cannot reach a test's or another caller's interpreter.
    from yeto.learners.torch import quant
    quant.keep_out_unless(needs_bitsandbytes(sys.argv[1:]))
    sys.exit(main())
