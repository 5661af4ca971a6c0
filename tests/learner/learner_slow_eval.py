"""The torch learner process with every held-out batch slowed by a fixed delay before it is evaluated (the real backend
otherwise): a tiny model whose evaluations take seconds, for tests/learner/test_learner_eval_beats.py.

    python tests/learner/learner_slow_eval.py DELAY_S <the learner's arguments>
"""
from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

from yeto.learners import shell
from yeto.learners.torch.backend import Rank, TorchBackend


class SlowEval(TorchBackend):
    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def evaluate(self, rank: Rank, heldout: list[Any]) -> float:
        def slowed() -> Iterator[Any]:
            for batch in heldout:       # the shell's list: it beats as the next batch is asked for
                time.sleep(self.delay_s)
                yield batch
        return super().evaluate(rank, slowed())     # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(shell.main(SlowEval(float(sys.argv[1])), sys.argv[2:]))
