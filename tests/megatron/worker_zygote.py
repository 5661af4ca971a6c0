"""A pre-imported parent for the ranks of tests/megatron/megatron_worker.py, as learners/torch/zygote.py is for the
launcher's CPU ranks: torch, transformers, peft and Megatron-Core are imported once (~5.5 CPU s each time a rank
imported them, 2026-12-06), and each rank is forked from here, runs the worker's `main` as `python megatron_worker.py`
would, and exits.

One JSON object a line on stdin, an island: {"argv": [the worker's arguments], "ranks": [{"env": {...}, "log": path}]};
answered with {"pids": [...]} once every rank is forked, then {"codes": [...]} (the exit status of each, -N for a
signal) once every rank has exited. It ends when its stdin closes.

Why the fork is safe (learners/torch/zygote.py says the same of its own): this process only imports; no torch op has
run and no thread is started (one thread in /proc/self/task after these imports, checked before each fork), so the
ranks build their gloo groups, OpenMP's pool and their RNG state themselves, as spawned ranks do. A rank's environment
is the zygote's but for the rank's own variables (RANK, WORLD_SIZE, ...: read by torch.distributed when the rank
opens its group); OMP_NUM_THREADS is 1 in both. The collector is off during the imports and its objects frozen
before a fork, on again in the rank (CPython's recipe for a process that forks without exec)."""
from __future__ import annotations

import gc

gc.disable()

import atexit  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
# What the ranks would import late: the model's and the optimizer's Megatron-Core modules (learners/megatron imports
# them in its functions), the adapters' save and load.
import megatron.core.distributed  # noqa: E402
import megatron.core.models.gpt.gpt_layer_specs  # noqa: E402
import megatron.core.optimizer  # noqa: E402
import megatron.core.parallel_state  # noqa: E402
import megatron.core.tensor_parallel.random  # noqa: E402
import megatron.core.transformer.moe.moe_utils  # noqa: E402
import megatron.core.transformer.transformer_block  # noqa: E402
import megatron.core.transformer.transformer_config  # noqa: E402,F401
import numpy as np  # noqa: E402
import peft  # noqa: E402,F401
import safetensors.torch  # noqa: E402,F401
import transformers  # noqa: E402,F401

import megatron_worker  # noqa: E402  (torch, Megatron-Core and the learner's modules)


def rank(argv: list[str], env: dict[str, str], log: str) -> None:
    """In the forked child: the worker's main, its output to `log`, then the exit a spawned worker would make."""
    code = 0
    try:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [megatron_worker.__file__, *argv]
        gc.enable()
        np.random.seed()              # numpy's global generator, seeded at its import: each rank's own, as when spawned
        megatron_worker.main(*argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:       # noqa: BLE001  (any failure is the rank's exit 1, as an uncaught one would be)
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    for line in sys.stdin:
        island = json.loads(line)
        pids = []
        for r in island["ranks"]:
            threads = len(os.listdir("/proc/self/task"))
            assert threads == 1, f"the zygote runs {threads} threads: a fork would copy their locks held"
            sys.stdout.flush()
            gc.freeze()
            pid = os.fork()
            if pid == 0:
                rank(island["argv"], r["env"], r["log"])
            pids.append(pid)
        print(json.dumps({"pids": pids}), flush=True)
        print(json.dumps({"codes": [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]}), flush=True)


if __name__ == "__main__":
    serve()
