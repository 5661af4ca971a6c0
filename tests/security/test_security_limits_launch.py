"""Limits at launch: `yeto launch` refuses NaN / negative / zero numbers and fleets over the caps (exit 2, saying what
to change, nothing started), the schema refuses absurd fleets, and the launcher service rejects a LaunchRun over its
capacity before it spawns anything (MessageRejected, no RunLaunched)."""
from __future__ import annotations

import asyncio
import contextlib
import os

import pytest
from pydantic import ValidationError

from waiting import until
from yeto.cli.main import main
from yeto.infra.bus import connect
from yeto.infra.runner import run_service
from yeto.schemas.base import SYSTEM_RUN, parse
from yeto.schemas.capacity import Capacity
from yeto.schemas.commands import LaunchRun
from yeto.schemas.subjects import event_subject
from yeto.services.launcher import wiring as launcher_wiring
from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.effects import Effects

pytestmark = pytest.mark.timeout(120)
CPUS = os.cpu_count() or 1
SPEC = {"cloud": "local", "gpu": "cpu", "count": 1, "nodes": 1, "region": None, "spot": False, "price_per_hour": 0.0}


def launch(capsys, tmp_path, *argv) -> tuple[int, str]:
    code = main(["--state-dir", str(tmp_path / "state"), "launch", "--model", "m", "--data", "d.jsonl", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("gpu, says", [
    ("local:99999999999xcpu", f"99999999999 CPU learner processes and this machine has {CPUS} CPUs; use at most {CPUS}"),
    (",".join(["local:1xcpu"] * (CPUS + 1)), f"this machine has {CPUS} CPUs"),
    ("aws:65x8xh100", "65 nodes, more than 64; split it"),
    ("aws:64xh100", "64 GPUs per node, more than 16"),
    (",".join(["aws:8xh100"] * 17), "17 islands is more than the cap of 16; use fewer islands or raise --max-islands"),
])
def test_fleets_over_the_caps_exit_2_saying_what_to_change(capsys, tmp_path, gpu, says):
    code, err = launch(capsys, tmp_path, "--gpu", gpu)
    assert code == 2 and says in err, err
    assert not (tmp_path / "state" / "stack.json").exists()            # nothing was started


def test_max_islands_raises_the_cloud_cap(capsys, tmp_path):
    code, err = launch(capsys, tmp_path, "--gpu", ",".join(["aws:8xh100"] * 17), "--max-islands", "17")
    assert "islands is more than the cap" not in err                      # it gets past the cap (and fails later: no stack)


@pytest.mark.parametrize("flags, says", [
    (["--lr", "nan"], "--lr nan: must be a finite number > 0"),
    (["--lr", "-0.1"], "--lr -0.1: must be a finite number > 0"),
    (["--max-spend", "inf"], "--max-spend inf"),
    (["--max-spend", "0"], "--max-spend 0"),
    (["--max-tokens", "-5"], "--max-tokens -5"),
    (["--local-price", "nan"], "--local-price nan: must be a finite number >= 0"),
    (["--head-price", "-1"], "--head-price -1"),
    (["--outer-lr", "nan"], "--outer-lr nan"),
    (["--max-time", "0s"], "--max-time '0s': write a duration above zero"),
    (["--max-time", "9" * 400], "--max-time"),
    (["--max-islands", "0"], "--max-islands 0"),
])
def test_numbers_that_are_not_finite_and_positive_exit_2(capsys, tmp_path, flags, says):
    code, err = launch(capsys, tmp_path, "--gpu", "local:1xcpu", *flags)
    assert code == 2 and says in err, err
    assert not (tmp_path / "state" / "stack.json").exists()


@pytest.mark.parametrize("entry", [{"count": 99999999999}, {"nodes": 65}, {"price_per_hour": float("nan")},
                                   {"price_per_hour": "1"}, {"cloud": "moon"}, {"gpu": "h100; rm -rf /"}, {"spot": "yes"}])
def test_the_schema_refuses_absurd_fleet_entries(entry):
    with pytest.raises(ValidationError):
        LaunchRun(run_id="r-x", fleet=[{**SPEC, **entry}], recipe={})


@pytest.mark.parametrize("recipe, says", [
    ({"train": "x"}, "train must be a mapping"), ({"limits": {"max_spend": "lots"}}, "limits.max_spend must be a number"),
    ({"limits": {"max_spend": float("nan")}}, "finite"),
    ({"limits": {"max_tokens": 1.5}}, "limits.max_tokens must be an integer"),
    ({"train": {"lr": float("inf")}}, "train.lr must be finite"), ({"train": {"sync": {"num_fragments": "8"}}}, "num_fragments"),
    ({"sync": {"num_fragments": 10**9}}, "num_fragments must be in"), ({"recover_timeout_s": -1}, "recover_timeout_s"),
    ({"head_price_per_hour": 1e300}, "at most"), ({"output": ["x"]}, "output must be a string"),
])
def test_the_schema_refuses_recipes_whose_read_parts_are_not_what_services_expect(recipe, says):
    with pytest.raises(ValidationError, match=says):
        LaunchRun(run_id="r-x", fleet=[SPEC], recipe=recipe)


@contextlib.asynccontextmanager
async def launcher_rejecting(nats_server, tmp_path, run_id: str):
    """A real launcher service on the bus (capacity: 2 CPUs, no GPU, 3 islands); yields (bus, the MessageRejected
    events of the launcher that name `run_id`, an event set at each), and checks after that the launcher still runs."""
    url = nats_server.url
    bus = await connect(url, name="test")
    spec = launcher_wiring.spec(Effects({"local": LocalBackend(tmp_path)}, url, poll_s=0.2), tick_s=0.5,
                                capacity=Capacity(cpus=2, gpus=0, max_islands=3))
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_service(spec, url, instance="launcher-cap", stop=stop, ready=ready))
    rejected, changed = [], asyncio.Event()

    async def collect(d):
        e = parse(d.data)
        if e.consumer == "launcher" and e.excerpt and run_id in e.excerpt:
            rejected.append(e)
            changed.set()
    watch = await bus.watch(event_subject(SYSTEM_RUN, "MessageRejected"), collect, deliver="new")
    try:
        await asyncio.wait_for(ready.wait(), 60)
        yield bus, rejected, changed
        assert not task.done()
    finally:
        stop.set()
        await task
        await watch.close()
        await bus.close()


async def test_the_launcher_rejects_a_launch_over_its_capacity_before_spawning(nats_server, tmp_path, run_id):
    async with launcher_rejecting(nats_server, tmp_path, run_id) as (bus, rejected, changed):
        big = {f"{run_id}-a": [SPEC] * 4, f"{run_id}-b": [{**SPEC, "count": 3}], f"{run_id}-c": [{**SPEC, "gpu": "cuda"}]}
        for run, fleet in big.items():
            await bus.publish(LaunchRun(id=f"{run}-launch", run_id=run, source="test", fleet=fleet, recipe={}))
        await until(lambda: len(rejected) >= 3, 60, "three rejections", changed=changed)
        reasons = " | ".join(e.reason for e in rejected)
        assert "4 islands is more than the cap of 3" in reasons and "$YETO_MAX_ISLANDS" in reasons, reasons
        assert "3 CPU learner processes and this machine has 2 CPUs" in reasons, reasons
        assert "use 1 CUDA devices and this machine has 0" in reasons, reasons
        for run in big:
            assert await bus.last(event_subject(run, "RunLaunched")) is None
            assert not (tmp_path / "runs" / run).exists()                  # nothing spawned


@pytest.mark.parametrize("flags, says", [
    (["--lora-r", "100000000"], "lora_r 100000000 (--lora-r) is over 4096, the most a run takes: set it to at most 4096"),
    (["--seq-len", "1000000000"], "seq_len 1000000000 (--seq-len) is over 131072"),
    (["--max-steps", "1" + "0" * 12], "max_steps 1000000000000 (--max-steps) is over 100000000"),
    (["--seq-len", "65536", "--micro-batch", "64"], "tokens in one forward pass, over 1048576: lower --seq-len or"),
])
def test_recipe_numbers_over_their_caps_exit_2_before_anything_starts(capsys, tmp_path, flags, says):
    code, err = launch(capsys, tmp_path, "--gpu", "local:1xcpu", *flags)
    assert code == 2 and says in err, err
    assert not (tmp_path / "state" / "stack.json").exists()


def test_the_schema_refuses_a_recipe_over_the_caps_with_the_same_sentence():
    with pytest.raises(ValidationError, match=r"train: lora_r 100000000 \(--lora-r\) is over 4096"):
        LaunchRun(run_id="r-x", fleet=[SPEC], recipe={"train": {"lora_r": 10**8}})
    LaunchRun(run_id="r-x", fleet=[SPEC], recipe={"train": {"lora_r": 4096, "seq_len": 8192, "micro_batch": 8}})


async def test_the_launcher_refuses_a_launch_over_the_recipe_caps_sent_over_the_bus(nats_server, tmp_path, run_id):
    """What the CLI refuses, the launcher refuses too: a LaunchRun published by hand (the schema skipped on the sending
    side) with lora_r 10^8 is a MessageRejected saying what to change, and nothing is launched."""
    async with launcher_rejecting(nats_server, tmp_path, run_id) as (bus, rejected, changed):
        forged = LaunchRun.model_construct(id=f"{run_id}-launch", run_id=run_id, source="test", fleet=[SPEC],
                                           recipe={"train": {"lora_r": 10**8}})
        await bus.publish(forged)
        await until(lambda: rejected, 60, "the launcher's rejection", changed=changed)
        assert "lora_r 100000000 (--lora-r) is over 4096" in rejected[0].reason, rejected[0].reason
        assert await bus.last(event_subject(run_id, "RunLaunched")) is None
        assert not (tmp_path / "runs" / run_id).exists()
