"""A Megatron-Core island on the CPU: a tiny Mixtral's experts split over two gloo ranks (EP 2), or every tensor
split over two tensor-parallel ranks (TP 2: attention, experts, embedding and output layer, with sequence
parallelism), or both (EP 2 x TP 2, four ranks), computes what transformers computes, trains exactly as one rank
does on the same global batch, and rank 0 reads and writes the other ranks' experts and shards under the checkpoint's
names, so the artifact it saves loads in transformers. With LoRA on the attention projections (one rank and EP 2),
the adapters start at the base, train alike on both, and the adapter saved as the finalizer saves one loads with
peft onto the base checkpoint."""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from yeto.learners.megatron import tiny

pytest.importorskip("megatron.core")
ZYGOTE = Path(__file__).parent / "worker_zygote.py"       # forks the ranks of megatron_worker.py


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Zygote:
    """worker_zygote.py: the ranks forked from one pre-imported parent instead of each importing torch, transformers
    and Megatron-Core again (~5.5 CPU s a rank); what each rank runs is the worker's main, as before."""

    def __init__(self, log: Path):
        self.proc = subprocess.Popen([sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(log, "w"), bufsize=0, env={**os.environ, "OMP_NUM_THREADS": "1"})
        self.log, self.pending = log, b""

    def answer(self, timeout: float) -> dict:
        """The zygote's next line; fails with its log past `timeout` s or when it is gone."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, left))
            if not ready:
                raise AssertionError(f"the megatron zygote did not answer within {timeout:.0f}s:\n{self.log.read_text()[-3000:]}")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            assert chunk, f"the megatron zygote is gone (exit {self.proc.wait()}):\n{self.log.read_text()[-3000:]}"
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = Zygote(tmp_path_factory.mktemp("megatron-zygote") / "zygote.log")
    yield z
    z.close()


def _run_island(zygote: Zygote, world_size: int, model_dir: Path, out: Path, tp: int = 1, tuning: str = "full") -> dict:
    port = _free_port()
    ranks = [{"env": {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"},
              "log": str(out.with_suffix(f".rank{rank}.log"))} for rank in range(world_size)]
    zygote.proc.stdin.write((json.dumps({"argv": [str(out), str(model_dir), str(out.with_suffix(".artifact")), str(tp),
                                                   tuning], "ranks": ranks}) + "\n").encode())
    pids = zygote.answer(60)["pids"]
    try:
        codes = zygote.answer(240 * world_size)["codes"]       # as long as waiting on each spawned rank in turn took
    except AssertionError:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise
    for r, code in zip(ranks, codes):
        assert code == 0, Path(r["log"]).read_text()[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def islands(tmp_path_factory, zygote) -> tuple[dict, ...]:
    """One rank, EP 2, TP 2 (EP 1), EP 2 x TP 2: the same model, the same global batches."""
    root = tmp_path_factory.mktemp("megatron")
    model_dir = tiny.write_model_dir(root / "model")
    return (_run_island(zygote, 1, model_dir, root / "one.json"), _run_island(zygote, 2, model_dir, root / "two.json"),
            _run_island(zygote, 2, model_dir, root / "tp2.json", tp=2),
            _run_island(zygote, 4, model_dir, root / "ep2tp2.json", tp=2))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_megatron_logits_are_transformers_logits_on_one_and_two_expert_parallel_ranks(islands):
    for measured in islands:
        assert measured["initial_diff"] < 1e-4


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_expert_or_tensor_parallel_ranks_train_as_one_rank_on_the_same_global_batch(islands):
    one, *split = islands
    assert one["losses"][-1] < one["losses"][0] - 0.2        # it trained, so the comparison means something
    for measured in split:
        assert len(one["losses"]) == len(measured["losses"]) == 6
        for a, b in zip(one["losses"], measured["losses"]):
            assert b == pytest.approx(a, rel=1e-4, abs=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rank0_reads_and_writes_the_other_ranks_experts_and_the_artifact_loads(islands):
    for measured in islands:
        assert measured["trained_vs_base"] > 1e-2             # training moved the logits away from the base's
        assert measured["artifact_diff"] < 1e-4               # the saved artifact is what the island computes
        assert measured["restored_diff"] < 1e-4              # the base written back reached every rank's experts
    names = islands[1]["names"]
    assert "model.layers.1.block_sparse_moe.experts.3.w3.weight" in names     # held by rank 1 of two
    assert all(names == measured["names"] for measured in islands)     # the layout depends on neither EP nor TP


@pytest.fixture(scope="module")
def lora_islands(tmp_path_factory, zygote) -> tuple[dict, dict]:
    """LoRA (r 4, q/k/v/o) on one rank and on EP 2: the same model, the same global batches."""
    root = tmp_path_factory.mktemp("megatron-lora")
    model_dir = tiny.write_model_dir(root / "model")
    return (_run_island(zygote, 1, model_dir, root / "one.json", tuning="lora"),
            _run_island(zygote, 2, model_dir, root / "two.json", tuning="lora"))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lora_adapters_start_at_the_base_train_alike_on_ep2_and_load_with_peft(lora_islands):
    one, two = lora_islands
    assert one["losses"][-1] < one["losses"][0] - 0.05       # the adapters trained
    for a, b in zip(one["losses"], two["losses"]):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-5)
    for measured in lora_islands:
        assert measured["initial_diff"] < 1e-4               # B = 0: the adapted model is the base
        assert measured["trained_vs_base"] > 1e-2
        assert measured["artifact_diff"] < 1e-4              # peft on the base computes what the island computes
        assert measured["restored_diff"] < 1e-4             # B written back to 0 on every rank
    assert two["names"] == one["names"] and len(one["names"]) == 2 * 4 * 2      # layers x q,k,v,o x A,B
    assert "base_model.model.model.layers.1.self_attn.o_proj.lora_B.default.weight" in one["names"]
