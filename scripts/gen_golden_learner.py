"""Record the learner's golden loss history (tests/learner/fixtures/golden_loss.json), on purpose only:
after a change that is meant to change the training math. `python scripts/gen_golden_learner.py`"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "learner"))
import learner_golden


def main() -> None:
    import torch
    histories = learner_golden.loss_histories()
    learner_golden.FIXTURE.parent.mkdir(exist_ok=True)
    learner_golden.FIXTURE.write_text(json.dumps({"torch": torch.__version__, **histories}, indent=1) + "\n")
    print(f"wrote {learner_golden.FIXTURE}: " + ", ".join(f"{k} {v[0]:.4f} -> {v[-1]:.4f}" for k, v in histories.items()))


if __name__ == "__main__":
    main()
