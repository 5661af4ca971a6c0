"""Same seed, same curve: the tiny model's loss at every step, trained alone and through the DiLoCo step
boundary with the real SyncerCore, matches the recorded golden history (fixtures/golden_loss.json,
written on purpose by scripts/gen_golden_learner.py after a change meant to move it)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import learner_golden

# The losses are f32 sums on the CPU with one thread: the same machine and torch reproduce them bit for bit.
# Another CPU's (or torch's) kernels sum in another order, ~1e-7 relative per operation, which 16 steps of
# AdamW grow to ~1e-5; the first sync alone moves the fourth step's loss by 1e-2 (relative).
RTOL = 1e-4


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_same_seed_gives_the_recorded_loss_curve_alone_and_through_diloco():
    golden = json.loads(learner_golden.FIXTURE.read_text())
    got = learner_golden.loss_histories()
    for arm in ("local", "diloco"):
        assert len(got[arm]) == len(golden[arm]) == learner_golden.NUM_STEPS
        np.testing.assert_allclose(got[arm], golden[arm], rtol=RTOL, err_msg=f"{arm} (recorded with torch {golden['torch']})")
    # Fragment 1 is pushed after step 2 (offset H/P), merged at once and applied after step 3.
    assert got["diloco"][:3] == got["local"][:3] and got["diloco"][3] != got["local"][3]
