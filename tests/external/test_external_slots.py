"""External slots without a run: the launcher's decisions, the external backend's tokens, a token's refusals.

A joined island finishes at max_steps, a silent one is re-opened as a new generation; the backend's token carries the
slot's own credential (scoped as a cloud island's) in a 0600 file, a new generation's replacing the old."""
from __future__ import annotations

import importlib
import os
from datetime import datetime, timedelta, timezone
from functools import reduce

import pytest

from yeto.cli.join import learner_argv
from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus.perms import learner_permissions
from yeto.infra.runner import Publish
from yeto.schemas.commands import LaunchRun
from yeto.schemas.fleet import IslandExited, IslandPreempted, IslandReplaced, IslandRequested, IslandUp, StartIsland, StopIsland
from yeto.schemas.learner_contract import LearnerArgs
from yeto.schemas.training import LearnerProgress
from yeto.services.launcher.api import JoinToken, external_entry, read_token
from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.external import ExternalBackend
from yeto.services.launcher.logic import decide
from yeto.services.launcher.state import evolve

pytestmark = pytest.mark.timeout(30)
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
SLOT = external_entry(2.5)
LAUNCH = LaunchRun(id="L", run_id="r1", fleet=[SLOT], recipe={"train": {"model": "m", "max_steps": 50}})


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def beat(step: int, t: float, generation: int = 0) -> LearnerProgress:
    return LearnerProgress(run_id="r1", learner="island-0", generation=generation, step=step, loss=1.0, tokens=10,
                           tokens_per_s=1, step_time_s=0.1, lr=1e-3, ts=at(t))


def opened() -> list:
    """RunLaunched and the slot's IslandRequested, as launched (the external backend publishes nothing itself)."""
    launch = [p.msg for p in decide({}, LAUNCH, T0) if isinstance(p, Publish)]
    return [m.model_copy(update={"ts": T0}) for m in launch if not isinstance(m, StartIsland)]


def state(*events) -> dict:
    up = IslandUp(run_id="r1", island=0, generation=0, spec=SLOT, price_per_hour=2.5, backend="external",
                  handle="external:0:0", ts=at(1))
    return reduce(evolve, [*opened(), up, *events], {})


def decided(st: dict, t: float) -> list:
    return [p.msg for p in decide(st, None, at(t)) if isinstance(p, Publish)]


def test_an_open_slot_is_up_only_once_its_learner_reports_progress():
    waiting = reduce(evolve, opened(), {})
    assert [m.type for m in opened()] == ["RunLaunched", "IslandRequested"]
    assert decided(waiting, 3000) == []           # no learner yet: nothing starts its meter, nothing times it out
    (up,) = decided(evolve(waiting, beat(1, 40)), 41)
    assert isinstance(up, IslandUp) and (up.handle, up.backend, up.price_per_hour) == ("external:0:0", "external", 2.5)
    assert evolve(evolve(waiting, beat(1, 40)), up.model_copy(update={"ts": at(41)}))["r1"].islands[0].phase == "up"


def test_a_joined_island_that_reached_max_steps_has_finished_and_one_short_of_it_has_not():
    assert decided(state(beat(49, 5)), 6) == []
    (done,) = decided(state(beat(50, 5)), 6)
    assert isinstance(done, IslandExited) and done.exit_code == 0 and done.backend == "external"
    assert evolve(state(beat(50, 5)), done)["r1"].islands[0].phase == "finished"


def test_a_silent_joined_island_is_preempted_and_its_slot_reopened_as_the_next_generation():
    st = state(beat(10, 5))
    gone = decided(st, 5 + 301)                 # heartbeat_timeout_s 300 by default
    assert [type(m) for m in gone] == [IslandPreempted, StopIsland]
    st = reduce(evolve, gone, st)
    start = [m for m in decided(st, 310) if isinstance(m, StartIsland)]
    assert [(m.island, m.generation, m.spec["cloud"], m.start_step) for m in start] == [(0, 1, "external", 10)]
    st = reduce(evolve, [m for m in decided(st, 310) if isinstance(m, IslandRequested)], st)
    assert not [m for m in decided(evolve(st, beat(12, 311, generation=0)), 312) if isinstance(m, IslandReplaced)]
    (back,) = decided(evolve(st, beat(11, 320, generation=1)), 321)     # rejoined with the new generation's token
    assert isinstance(back, IslandReplaced) and (back.generation, back.previous_generation) == (1, 0)


def test_the_backend_writes_each_generations_token_with_the_slots_own_scoped_credential(tmp_path):
    bus_auth.prepare(tmp_path)                  # a stack with authentication: learner credentials are issued
    backend = ExternalBackend(tmp_path, "nats://127.0.0.1:4222")

    def start(generation: int) -> JoinToken:
        backend.start(IslandLaunch(run_id="r1", island=3, generation=generation, spec=SLOT, recipe=LAUNCH.recipe,
                                   num_islands=4, nats_url="", start_step=7 * generation))
        return JoinToken.decode(read_token(tmp_path, "r1", 3))
    first = start(0)
    assert (first.url, first.learner, first.slot, first.generation, first.num_islands) == \
        ("nats://127.0.0.1:4222", "island-3", 3, 0, 4)
    assert (first.recipe["model"], first.recipe["max_steps"]) == ("m", 50)      # the typed train section, in full
    users = (tmp_path / "auth" / "users.conf").read_text()
    assert first.credential["user"] in users and first.credential["password"] in users
    assert first.credential == bus_auth.load_identity(bus_auth.learner_file(tmp_path, "r1", "island-3"))
    assert learner_permissions("r1", "island-3")["subscribe"]["allow"] == [f"{first.credential['inbox_prefix']}.>"]
    assert oct(os.stat(next(tmp_path.rglob("slot-3.token"))).st_mode & 0o777) == "0o600"
    second = start(1)                           # re-opened: a new generation, the slot's user with a new password
    assert (second.generation, second.start_step, second.credential["user"]) == (1, 7, first.credential["user"])
    assert second.credential["password"] != first.credential["password"]     # the old generation's is refused
    backend.stop("r1", 3, 0, "")                # the old generation's stop leaves the new token alone
    assert JoinToken.decode(read_token(tmp_path, "r1", 3)).generation == 1
    backend.stop("r1", 3, 1, "")
    with pytest.raises(ValueError, match="no open external slot 3"):
        read_token(tmp_path, "r1", 3)


@pytest.mark.parametrize("text", ["", "nats://x", "yeto-join-!!", "yeto-join-" + "e30="])
def test_anything_but_a_join_token_is_refused_with_what_to_pass(text):
    with pytest.raises(ValueError, match="not a join token"):
        JoinToken.decode(text)


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_yeto_join_starts_either_backend_with_the_learner_process_contract(backend, tmp_path):
    token = JoinToken(url="tls://head:4222", credential={}, run_id="r1", learner="island-3", slot=3, generation=2,
                      num_islands=4, start_step=40, recipe={}, ca="PEM")
    argv = learner_argv(token, backend, tmp_path / "recipe.json", None, "nats://127.0.0.1:4223")
    assert argv[1:3] == ["-m", f"yeto.learners.{backend}"]
    assert callable(importlib.import_module(f"{argv[2]}.__main__").main)     # a runnable learner module
    parsed = LearnerArgs.parse(argv[3:], prog=argv[2])
    assert (parsed.run_id, parsed.learner, parsed.generation, parsed.learner_index, parsed.num_learners,
            parsed.start_step, parsed.nats_url) == ("r1", "island-3", 2, 3, 4, 40, "nats://127.0.0.1:4223")
    assert JoinToken.decode(token.encode()) == token
