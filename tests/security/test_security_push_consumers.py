"""Issue 41: a learner created a push consumer on its own run's keyframes whose deliver subject was
`yeto.cmd.finalizer.StopRun`, and the server pushed keyframes into the command subject (the deliver subject is in the
create request's body, which subject permissions cannot see). Now a learner's credential creates no consumer at all,
push or pull, under any name, in any API form: the server refuses each create and none exists after; the launcher
makes the learner's watches when it asks, and the learner pulls them. Against a real nats-server with the stack's users
file (a real local stack's learners train, merge and finalize through them: test_security_revocation.py)."""
from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import nats
import pytest

from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus import connect, nats_watch_maker
from yeto.infra.bus.nats_watches import LearnerWatches
from yeto.infra.bus.perms import watch_consumer
from yeto.infra.nats.server import NatsServer, ensure_streams
from yeto.schemas.subjects import command_subject, event_subject, keyframe_subject, run_deltas, run_keyframes

RUN = "r-push"
STOP = command_subject("finalizer", "StopRun")
API = "$JS.API.CONSUMER"


@pytest.fixture
def server(tmp_path, monkeypatch):
    state = tmp_path / "state"
    srv = NatsServer(state / "nats", users_file=bus_auth.prepare(state, ((RUN, "island-0"),))).start()
    monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(state)))

    async def setup() -> None:
        bus = await connect(srv.url, name="operator")
        await ensure_streams(bus)
        await bus.publish_raw(keyframe_subject(RUN, 0), b"weights", headers={"run": RUN})
        await bus.close()
    asyncio.run(setup())
    try:
        yield srv, state
    finally:
        srv.stop()


def creates(inbox: str) -> list[tuple[str, str, dict]]:
    """(stream, API subject, config) of every create a hostile learner tries: push consumers delivering into the
    finalizer's command subject (named with its own watch's name, durable, the legacy and the bare forms), and pulls."""
    mine = watch_consumer(RUN, "island-0")
    slot = f"{mine}-0"          # the first of the watch slots a learner's credential could create before 371f212
    push = {"filter_subject": run_keyframes(RUN), "deliver_subject": STOP, "ack_policy": "none"}
    return [("YETO_GKEY", f"{API}.CREATE.YETO_GKEY.{slot}.{run_keyframes(RUN)}", {**push, "name": slot}),
            ("YETO_GKEY", f"{API}.CREATE.YETO_GKEY.{mine}.{run_keyframes(RUN)}", {**push, "name": mine}),
            ("YETO_GKEY", f"{API}.CREATE.YETO_GKEY.evil.{run_keyframes(RUN)}", {**push, "name": "evil"}),
            ("YETO_GKEY", f"{API}.DURABLE.CREATE.YETO_GKEY.{mine}", {**push, "durable_name": mine}),
            ("YETO_GKEY", f"{API}.CREATE.YETO_GKEY", push),
            ("YETO_EVT", f"{API}.CREATE.YETO_EVT.{mine}.{event_subject(RUN, 'CheckpointMarkedFinal')}",
             {"name": mine, "filter_subject": event_subject(RUN, "CheckpointMarkedFinal"), "deliver_subject": inbox}),
            ("YETO_GKEY", f"{API}.CREATE.YETO_GKEY.{mine}.{run_keyframes(RUN)}",       # a pull consumer
             {"name": mine, "filter_subject": run_keyframes(RUN), "ack_policy": "explicit"})]


@pytest.mark.timeout(60)
def test_a_learner_cannot_create_a_push_consumer_into_a_command_subject_or_any_consumer(server):
    srv, state = server
    ident = json.loads(bus_auth.learner_file(state, RUN, "island-0").read_text())

    async def attack() -> list[str]:
        errors: list[str] = []
        got = asyncio.Event()

        async def on_error(e: Exception) -> None:
            errors.append(str(e).lower())
            got.set()
        nc = await nats.connect(srv.url, user=ident["user"], password=ident["password"],
                                inbox_prefix=ident["inbox_prefix"], error_cb=on_error, allow_reconnect=False)
        refused = []
        try:
            for stream, subject, config in creates(nc.new_inbox()):
                await nc.publish(subject, json.dumps({"stream_name": stream, "config": config}).encode(),
                                 reply=nc.new_inbox())

                while not (said := [e for e in errors if "permissions violation" in e and f'"{subject.lower()}"' in e]):
                    got.clear()
                    await asyncio.wait_for(got.wait(), 10)
                refused += said[:1]
        finally:
            await nc.close()
        return refused

    refused = asyncio.run(attack())
    assert len(refused) == len(creates("_INBOX.x")), refused

    async def consumers() -> list[str]:
        bus = await connect(srv.url, name="operator")
        try:
            return [c.name for s in ("YETO_GKEY", "YETO_GDELTA", "YETO_EVT") for c in await bus.js.consumers_info(s)]
        finally:
            await bus.close()
    assert asyncio.run(consumers()) == [], "no create reached the server: nothing pushes into the command subject"


@contextlib.asynccontextmanager
async def watching(srv, state, *kinds: str) -> AsyncIterator[tuple]:
    """The operator's bus, island-0's started watches of `kinds` (asked of a launcher serving the requests) and the queue
    their deliveries go to."""
    buses = []
    with pytest.MonkeyPatch.context() as mp:
        for who in (bus_auth.operator_file(state), bus_auth.service_file(state),
                    bus_auth.learner_file(state, RUN, "island-0")):
            mp.setenv(bus_auth.CREDS_ENV, str(who))
            buses.append(await connect(srv.url, name=who.stem))
    stop, seen = asyncio.Event(), asyncio.Queue()
    serving = asyncio.create_task(nats_watch_maker.serve(buses[1], stop))
    watches = LearnerWatches(buses[2], RUN, "island-0", {kind: seen.put for kind in kinds})
    try:
        await watches.start()
        yield buses[0], watches, seen
    finally:
        await watches.close()
        stop.set()
        await serving
        for bus in buses:
            await bus.close()


@pytest.mark.timeout(60)
def test_the_launcher_makes_a_learners_watches_pull_only_with_its_runs_filters_and_the_learner_reads_them(server):
    async def watch() -> tuple[dict, list]:
        async with watching(*server, "keyframes", "deltas", "final") as (operator, _, seen):
            announced = await asyncio.wait_for(seen.get(), 10)
            return announced.headers, [(await operator.js.consumer_info(s, watch_consumer(RUN, "island-0"))).config
                                       for s in ("YETO_GKEY", "YETO_GDELTA", "YETO_EVT")]

    headers, configs = asyncio.run(watch())
    assert headers["run"] == RUN and headers["Nats-Msg-Size"] == str(len(b"weights")), "headers only, its own run's"
    assert all(c.deliver_subject is None for c in configs), "pull consumers: nothing is pushed anywhere"
    assert [c.filter_subject for c in configs] == [
        run_keyframes(RUN), run_deltas(RUN), event_subject(RUN, "CheckpointMarkedFinal")]


@pytest.mark.timeout(60)
def test_a_watch_whose_consumer_is_gone_asks_the_launcher_again_and_goes_on(server):
    """A head replaced without its consumers, or one dropped after an hour without a pull: the learner's pull finds
    no consumer, it asks again, and what is published after reaches it."""
    async def lose_and_recover() -> list[int]:
        async with watching(*server, "keyframes") as (operator, watches, seen):
            first = (await asyncio.wait_for(seen.get(), 10)).seq
            await operator.js.delete_consumer("YETO_GKEY", watch_consumer(RUN, "island-0"))
            later = await operator.publish_raw(keyframe_subject(RUN, 0), b"newer", headers={"run": RUN})
            while (seq := (await asyncio.wait_for(seen.get(), 30)).seq) != later:
                pass
            return [first, seq, watches.num_made]

    first, later, num_made = asyncio.run(lose_and_recover())
    assert later > first and num_made == 2, "made again once, on the learner's request"


@pytest.mark.timeout(60)
def test_asking_again_remakes_only_a_missing_watch_and_a_live_one_keeps_its_place(server, monkeypatch):
    """A pull that finds no consumer asks again; the launcher then makes only the missing watches. Remaking live ones on
    every request livelocked a learner on a cluster that had just lost a node (tests/infra/test_infra_cluster.py): a
    consumer being elected answered 503, the remake deleted all three, and their new groups were elected again."""
    monkeypatch.setattr(nats_watch_maker, "REMAKE_S", 0.0)     # the fresh request below comes within a second

    async def ask_again() -> tuple[list, list, list, list]:
        async with watching(*server, "keyframes", "deltas", "final") as (operator, watches, seen):
            await asyncio.wait_for(seen.get(), 10)
            name = watch_consumer(RUN, "island-0")
            streams = ("YETO_GKEY", "YETO_GDELTA", "YETO_EVT")
            before = [await operator.js.consumer_info(s, name) for s in streams]
            await operator.js.delete_consumer("YETO_GDELTA", name)
            await watches.ask(watches.num_made)            # what a pull that found no consumer does
            after = [await operator.js.consumer_info(s, name) for s in streams]
            fresh = json.loads((await operator.nc.request(f"yeto.watches.{RUN}.island-0", b"", timeout=30)).data)
            again = [await operator.js.consumer_info(s, name) for s in streams]
            return before, after, fresh["made"], again

    before, after, fresh, again = asyncio.run(ask_again())
    assert [i.created for i in after] == [before[0].created, after[1].created, before[2].created]
    assert after[1].created > before[1].created, "the missing one was made"
    assert after[0].delivered.stream_seq == before[0].delivered.stream_seq >= 1, "the live one kept its place"
    assert fresh == ["keyframes", "deltas", "final"], "an empty body (a starting or an older learner) remakes all"
    assert all(a.created > b.created for a, b in zip(again, after)), "afresh: each one new"
