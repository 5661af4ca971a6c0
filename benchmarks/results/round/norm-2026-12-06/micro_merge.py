"""Where a kept round's merge goes, one thread: the Gram pass and the outer step over 4 q4 pushes kept encoded against
the same over f32 rows, and the pushes' piece decode alone; the step's kept pushes decoded 1 piece (512 values) per call
(as before merge.STEP_DECODE) against STEP_DECODE pieces; interleaved reps, wall and process CPU ms (best of reps).
    python micro_merge.py <values in M> <reps>"""
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np

from yeto.schemas import codecs
from yeto.schemas.codecs.base import set_threads
from yeto.services.syncer import gram, merge
from yeto.services.syncer.rows import CHUNK, FragmentRows

n = int(sys.argv[1]) << 20 if len(sys.argv) > 1 else 64 << 20
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
set_threads(1)
rng = np.random.default_rng(0)
theta = rng.standard_normal(n, dtype=np.float32)
mom = rng.standard_normal(n, dtype=np.float32) * 1e-3
deltas = [codecs.Q4.encode(rng.standard_normal(n, dtype=np.float32) * 1e-3) for _ in range(4)]
kept = FragmentRows(theta, mom)
for k, d in enumerate(deltas):
    kept.keep_encoded(k, codecs.Q4, d, n)
dense = FragmentRows(theta, mom)
for k, d in enumerate(deltas):
    codecs.Q4.decode(d, n, out=dense.push(k))
need = np.tril(np.ones((5, 5), dtype=np.bool_), -1)
c = np.array([[1.0, -0.1, .01, .01, .01, .01], [0.0, 0.9, -.1, -.1, -.1, -.1]])
assert (gram.gram_pass(kept.rows[1:6], need, kept.kept_of(4)) == gram.gram_pass(dense.rows[1:6], need)).all()


def t_decode():
    for k in range(4):
        gram.kept_norm(codecs.Q4, kept.encoded[k], n)


tests = dict(kept_norm_x4=t_decode,
             gram_pass_kept=lambda: gram.gram_pass(kept.rows[1:6], need, kept.kept_of(4)),
             gram_pass_f32=lambda: gram.gram_pass(dense.rows[1:6], need),
             step_dry_f32=lambda: merge._apply(dense, c, CHUNK, commit=False))
for pieces in (1, 4, 8, 16):
    def step(commit, pieces=pieces):
        merge.STEP_DECODE = pieces
        merge._apply(kept, c, CHUNK, commit=commit)
    tests[f"step_dry_kept_{pieces}"] = lambda step=step: step(False)
    tests[f"step_kept_{pieces}"] = lambda step=step: step(True)
best = {}
for rep in range(reps + 1):
    for name, f in tests.items():
        w, cp = time.perf_counter(), time.process_time()
        f()
        w, cp = time.perf_counter() - w, time.process_time() - cp
        if rep:                                  # the first pass compiles and faults pages in
            b = best.setdefault(name, [1e9, 1e9])
            b[0], b[1] = min(b[0], w), min(b[1], cp)
print(f"n={n} load={open('/proc/loadavg').read().strip()}")
print(f"{'step':>16} {'wall ms':>9} {'cpu ms':>9} {'cpu ns/value':>13}")
for name, (w, cp) in best.items():
    print(f"{name:>16} {w * 1e3:9.1f} {cp * 1e3:9.1f} {cp * 1e9 / n:13.3f}")
