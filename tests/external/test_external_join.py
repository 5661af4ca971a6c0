"""External learners end to end on a real local stack: a PyTorch island and an MLX island joined with a token.

`yeto launch --gpu local:1xcpu --external-learners 1` opens a slot, `yeto join-token` prints its token, and
`yeto join RUN --backend mlx` (the token in $YETO_JOIN_TOKEN) trains an MLX island in it beside the PyTorch island:
rounds merge with both as responders, the joined island finishes at max_steps and is billed at --external-price,
the run finalizes, and the token's secret is on neither the tape nor a log. One run, shared by this module's tests."""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))
import learner_tiny
from e2e_stack import YETO, Stack
from waiting import wait_for
from yeto.services.launcher.backends.local import LocalBackend

pytestmark = [pytest.mark.slow]
RUN = "ext-mlx"
STEPS = 120      # room for the two islands to train side by side once their starts are lined up (below)


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    material = learner_tiny.material(tmp_path_factory.mktemp("material"))
    s = Stack(tmp_path_factory.mktemp("external") / "home", material["model"], material["data"])
    try:   # the stack goes down even when the setup fails half way (a launch or a join that never came)
        # --quorum 2: a round waits for both islands, so one that starts late (the MLX one under load) still meets the other
        s.launch(RUN, "--max-steps", str(STEPS), "--seq-len", "64", "--quorum", "2", "--external-learners", "1",
                 "--external-price", "3.6", islands="local:1xcpu")
        # The torch island is frozen once the syncer took its initial values until the joined MLX island reports: on
        # two loaded cores the MLX learner started after the torch island had trained all its steps (CI, two test
        # workers), so no round could hold both. Frozen, an island is neither heard from nor live; it trains once the
        # other one does. Not before its initial values: a joined learner that finds no global version offers its own,
        # which the syncer refuses until the island is up (its first progress), and it sat out both of its joining
        # waits (2 x 10 s, learners/sync_hook.py) before its first step.
        backend = LocalBackend(s.home)
        wait_for(lambda: backend.current_generation(RUN, 0) is not None, 120, "the torch island's processes",
                 interval=0.05, detail=lambda: s.story(RUN))
        gen = backend.current_generation(RUN, 0)
        s.wait_for(RUN, "the syncer to take the torch island's initial values", lambda evs: any(
            e["learner"] == "island-0" for e in evs), "LearnerJoined", timeout=120)
        backend.stop(RUN, 0, gen, "", sig=signal.SIGSTOP)

        def token() -> str | None:
            got = s.yeto("join-token", RUN, "--slot", "1", timeout=30)
            return got.stdout.strip() if got.returncode == 0 else None
        secret = wait_for(token, 60, "the external slot's join token", interval=0.3, detail=lambda: s.story(RUN))
        log = s.home.parent / "join.out"
        env = {**s.env, "YETO_JOIN_TOKEN": secret}
        join = subprocess.Popen([YETO, "join", RUN, "--backend", "mlx"], env=env, stdout=open(log, "w"),
                                stderr=subprocess.STDOUT, start_new_session=True)   # its learner is a child
        try:
            # Then the other way round: the MLX island (fast once started) waits, frozen, for the torch one to report.
            s.wait_for(RUN, "the joined MLX island's first progress", lambda evs: any(
                e["learner"] == "island-1" for e in evs), "LearnerProgress", timeout=240)
            os.killpg(join.pid, signal.SIGSTOP)
            backend.stop(RUN, 0, gen, "", sig=signal.SIGCONT)
            s.wait_for(RUN, "the torch island's first progress", lambda evs: any(
                e["learner"] == "island-0" for e in evs), "LearnerProgress", timeout=240)
            os.killpg(join.pid, signal.SIGCONT)
            output = s.finish(RUN, timeout=300)
            code = join.wait(60)
        finally:
            backend.stop(RUN, 0, gen, "", sig=signal.SIGCONT)   # never left frozen
            if join.poll() is None:
                os.killpg(join.pid, signal.SIGCONT)
                os.killpg(join.pid, signal.SIGKILL)
        yield dict(stack=s, output=output, join_code=code, join_log=log.read_text(), token=secret)
    finally:
        s.down()


@pytest.mark.timeout(600)      # the module's run is set up inside this test's time
def test_torch_and_joined_mlx_islands_merge_rounds_together_and_the_run_finalizes(joined):
    s = joined["stack"]
    assert "run finalized (max_steps)" in joined["output"], joined["output"]
    assert joined["join_code"] == 0, joined["join_log"]
    assert "joining ext-mlx as island-1 generation 0 (mlx)" in joined["join_log"]
    merged = s.events(RUN, "RoundMerged")
    both = [e for e in merged if {"island-0", "island-1"} <= set(e["responders"])]
    assert both, f"rounds with both learners: {[(e['fragment'], e['responders']) for e in merged]}"
    print(f"{RUN}: {len(merged)} rounds merged, {len(both)} with both the torch and the MLX island")
    layouts = {e["learner"]: e["fingerprint"] for e in s.events(RUN, "LayoutDeclared")}
    assert set(layouts) == {"island-0", "island-1"} and len(set(layouts.values())) == 1, layouts
    (final,) = s.events(RUN, "RunFinalized")
    assert final["reason"] == "max_steps"


@pytest.mark.timeout(60)
def test_the_joined_island_is_an_island_like_any_other_up_once_connected_billed_at_the_external_price(joined):
    s = joined["stack"]
    up = {e["island"]: e for e in s.events(RUN, "IslandUp")}
    assert up[1]["backend"] == "external" and up[1]["spec"]["cloud"] == "external"
    assert up[1]["price_per_hour"] == 3.6 and up[0]["backend"] == "local"
    exited = [e for e in s.events(RUN, "IslandExited") if e["island"] == 1]
    assert [e["exit_code"] for e in exited] == [0], exited
    progress = [e for e in s.events(RUN, "LearnerProgress") if e["learner"] == "island-1"]
    assert max(e["step"] for e in progress) == STEPS
    assert progress[0]["seq"] < up[1]["seq"]       # up when its learner connected, not when the slot opened


@pytest.mark.timeout(60)
def test_the_token_and_its_password_are_on_neither_the_tape_nor_a_log(joined):
    s = joined["stack"]
    password = json.loads(base64.urlsafe_b64decode(joined["token"][len("yeto-join-"):]))["credential"]
    assert password["password"]
    rows = s.sql("select payload from events")
    for secret in (joined["token"], password["password"]):
        assert not [r for r in rows if secret in r["payload"]]
        logs = [p for p in s.home.rglob("*.log")] + [p for p in s.home.rglob("*.out")]
        assert logs and not [p for p in logs if secret in p.read_text(errors="replace")]
    token_file = next(s.home.rglob("slot-1.token"), None)
    assert token_file is None or oct(os.stat(token_file).st_mode & 0o777) == "0o600"
