"""warmup.py makes every kernel a real round uses: in a fresh process, after warm() with a run's codecs, real learners
(DilocoSync) and the real SyncerCore go through rounds and broadcasts without a single kernel gaining a compiled
signature (nothing left for the run's first round to compile). And the data plane warms a run's codecs once."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)
HERE = Path(__file__).parent

SCRIPT = r"""
import json, sys, tempfile, pathlib, importlib, pkgutil
sys.path[:0] = [sys.argv[2], sys.argv[3]]
import numba
from numba.core.registry import CPUDispatcher
from yeto.schemas.recipe import SyncConfig
import yeto.schemas.codecs, yeto.services.syncer
from yeto.services.syncer import warmup

def kernels():
    out = {}
    for pkg in (yeto.schemas.codecs, yeto.services.syncer):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            mod = importlib.import_module(info.name)
            for name, obj in vars(mod).items():
                if isinstance(obj, CPUDispatcher) and obj.__module__ == mod.__name__:
                    out[f"{mod.__name__}.{name}"] = len(obj.signatures)
    return out

codec = sys.argv[1]
warmup.warm({"codec_up": codec})
# The learners' side, in their own processes in a run, here in this one: their decode of the q4 broadcast and
# their encode of a push (with its error feedback) are not the syncer's to make.
import numpy as np
from yeto.schemas import codecs
x = np.ones(70000, dtype=np.float32)
down = codecs.codec("q4")
down.decode(down.encode(x), x.size)
codecs.ErrorFeedback(codecs.codec(codec)).encode(0, x)
before = kernels()
from test_training_simulation import run
run(pathlib.Path(tempfile.mkdtemp()), num_learners=3, steps=48,
    config=SyncConfig(num_fragments=4, inner_steps=8, alpha=0.5, codec_up=codec))
after = kernels()
print(json.dumps({"before": before, "after": after}))
"""


@pytest.mark.parametrize("codec", ["q4", "topk4"])
def test_after_warm_up_a_real_round_compiles_no_kernel(codec, tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, codec, str(HERE.parent / "training"), str(HERE.parent)],
                         capture_output=True, text=True, timeout=280, env={"NUMBA_CACHE_DIR": str(tmp_path / "numba"),
                                                                          "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    before, after = seen["before"], seen["after"]
    assert sum(before.values()) >= 5, before            # the warm-up compiled the kernels (a cold cache)
    grew = {k: (before.get(k, 0), n) for k, n in after.items() if n != before.get(k, 0)}
    assert not grew, f"kernels a real round compiled after the warm-up: {grew}"


def test_the_data_plane_warms_each_new_run_once_and_not_a_run_being_cut(tmp_path, monkeypatch):
    from yeto.services.syncer import warmup
    from yeto.services.syncer.dataplane import DataPlane
    from yeto.services.syncer.runs import RunInfo

    asked = []
    monkeypatch.setattr(warmup, "start", lambda sync: asked.append(sync))
    plane = DataPlane(state_dir=tmp_path / "syncer")
    runs = {"r1": RunInfo(sync={"codec_up": "topk4"}), "r2": RunInfo(sync={}, cut_requested=object())}
    plane.warm(runs)
    plane.warm(runs)
    assert asked == [{"codec_up": "topk4"}]
