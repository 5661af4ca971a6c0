"""kernels_warm.py makes every codec kernel a learner's first push and first applied global run: in a fresh process
with an empty numba cache, after the warm-up thread, a real DilocoSync pushes (q4, topk4: each with its error
feedback) and applies the syncer's real keyframe and q4 delta without a single codec kernel gaining a compiled
signature. Without the warm-up the same steps compile kernels (the check can fail). And the zygote's warm-up child
fills numba's on-disk cache beside `ready`: a rank forked from it waits for that child's end and loads every codec
kernel from the cache, compiling none."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from waiting import wait_for

pytestmark = pytest.mark.timeout(300)
TESTS = Path(__file__).resolve().parents[1]

KERNELS = r"""
import importlib, pkgutil
from numba.core.registry import CPUDispatcher
import yeto.schemas.codecs

def dispatchers():
    pkg = yeto.schemas.codecs
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher) and obj.__module__ == mod.__name__:
                yield f"{mod.__name__}.{name}", obj

def kernels():
    return {name: len(d.signatures) for name, d in dispatchers()}
"""

FIRST_PUSH = KERNELS + r"""
import json, sys
import numpy as np
sys.path[:0] = [sys.argv[2]]
from test_training_simulation import SHAPES, DictArrays
from yeto.learners import kernels_warm
from yeto.learners.diloco_sync import DilocoSync
from yeto.schemas.fragments import split_chunks
from yeto.schemas.recipe import SyncConfig
from yeto.services.syncer.broadcast import BroadcastShadow

codec, warm = sys.argv[1], sys.argv[3] == "warm"
if warm:
    kernels_warm.start()                      # as the learner shell does before its model loads
rng = np.random.default_rng(0)
sync = DilocoSync(DictArrays({k: rng.standard_normal(s) for k, s in SHAPES.items()}),
                  SyncConfig(num_fragments=2, inner_steps=4, alpha=0.0, codec_up=codec), run_id="r", learner="l0")
# The syncer's side (its own process in a run): version 0 as keyframes, version 1 as q4 deltas.
shadow = BroadcastShadow(run_id="r", fingerprint=sync.fingerprint, keyframe_every=16, codec_down="q4")
globals_ = []
for version in (0, 1):
    for p in sync.active:
        theta = sync.anchors[p] + np.float32(0.01 * version)
        globals_ += shadow.publish(p, version, theta, sync.layout.roles[p])
kernels_warm.wait()
before = kernels()
for h, payload in globals_:
    for hc, chunk in split_chunks(h, payload, 256):
        sync.offer(hc, chunk)
pushes = [x for step in range(1, 9) for x in sync.after_step(step, 100)]
print(json.dumps({"before": before, "after": kernels(), "versions": list(sync.versions.values()),
                  "pushes": sum(x.header.kind == "push" for x in pushes),
                  "kinds": sorted({x.header.codec for x in pushes})}))
"""


def run_script(script: str, *args: str, cache: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=280,
                         env={"NUMBA_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["q4", "topk4"])
def test_after_the_warm_up_the_first_push_and_global_compile_no_kernel(codec, tmp_path):
    seen = run_script(FIRST_PUSH, codec, str(TESTS / "training"), "warm", cache=tmp_path / "numba")
    assert seen["versions"] == [1, 1] and seen["pushes"] >= 2 and seen["kinds"] == [codec]
    before, after = seen["before"], seen["after"]
    assert sum(before.values()) >= 3, before             # the warm-up compiled them (an empty cache)
    grew = {k: (before.get(k, 0), n) for k, n in after.items() if n != before.get(k, 0)}
    assert not grew, f"kernels the first push or global compiled after the warm-up: {grew}"


@pytest.mark.slow
def test_without_the_warm_up_the_first_push_compiles_kernels(tmp_path):
    seen = run_script(FIRST_PUSH, "q4", str(TESTS / "training"), "cold", cache=tmp_path / "numba")
    grew = {k for k, n in seen["after"].items() if n != seen["before"].get(k, 0)}
    assert {"yeto.schemas.codecs.q4._encode_blocks", "yeto.schemas.codecs.q4._decode_blocks"} <= grew, grew


LOADED = KERNELS + r"""
import json
from yeto.learners import kernels_warm
kernels_warm.warm()
print(json.dumps({name: [int(d.stats.cache_hits.total()), int(d.stats.cache_misses.total())]
                  for name, d in dispatchers()}))
"""


@pytest.mark.slow
def test_the_zygote_fills_numbas_cache_in_its_warm_up_child_and_forks_with_no_thread(tmp_path):
    cache = tmp_path / "numba"
    env = {"NUMBA_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    log = tmp_path / "zygote.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "yeto.learners.torch.zygote"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, env=env, text=True)
    try:
        assert "ready" in json.loads(proc.stdout.readline() or "{}"), log.read_text()[-3000:]
        proc.stdin.write(json.dumps({"argv": ["--help"], "env": env, "log": str(tmp_path / "rank.log"),
                                     "exit_file": str(tmp_path / "exit"), "pgid": 0}) + "\n")
        proc.stdin.flush()
        assert "pid" in json.loads(proc.stdout.readline()), log.read_text()[-3000:]     # forked: no thread beyond BLAS's
        wait_for(lambda: (tmp_path / "exit").exists() or None, 120, "the forked rank's exit file")
        # `ready` does not wait for the warm-up child; its line says it filled the cache
        wait_for(lambda: "codec kernels ready in" in log.read_text() or None, 240, "the zygote's warm-up child")
        assert list(cache.rglob("q4._encode_blocks-*.nbi")) and list(cache.rglob("q4._decode_blocks-*.nbi"))
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert "warm-up exited" not in log.read_text()
    stats = run_script(LOADED, cache=cache)              # a rank's warm-up with that cache: every kernel loaded
    compiled = {name: hm for name, hm in stats.items() if hm[1]}
    assert not compiled and sum(h for h, _ in stats.values()) >= 2, stats    # q4 encode and decode at least


AFTER_SIBLING = KERNELS + r"""
import json, os
from yeto.learners import kernels_warm
go, go_w = os.pipe()
done, held = os.pipe()
if os.fork() == 0:              # the zygote's warm-up child: fills the empty cache once this process's warm-up started
    os.close(done)
    os.close(go_w)
    os.read(go, 1)
    kernels_warm.warm()
    os._exit(0)
os.close(held)
kernels_warm.after(done)         # as the zygote does before it forks a rank
kernels_warm.start()             # the rank's warm-up thread: started while the cache is still empty
os.write(go_w, b"x")
kernels_warm.wait()
print(json.dumps({name: [int(d.stats.cache_hits.total()), int(d.stats.cache_misses.total())]
                  for name, d in dispatchers()}))
"""


@pytest.mark.slow
def test_a_rank_forked_before_the_warm_up_child_ends_waits_for_it_and_compiles_nothing(tmp_path):
    """On an empty cache the zygote answers `ready` while its child compiles: a rank's warm-up, started before the
    child even began, loads every kernel from the cache the child filled instead of compiling them beside it."""
    stats = run_script(AFTER_SIBLING, cache=tmp_path / "numba")
    compiled = {name: hm for name, hm in stats.items() if hm[1]}
    assert not compiled and sum(h for h, _ in stats.values()) >= 2, stats
