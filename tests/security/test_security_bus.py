"""Least privilege on the bus, against a real nats-server started with the stack's users file: an island's
credential is refused (by the server's permission violation) everything but its own pushes, its learner
events and its run's globals, which work."""
from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus import connect, nats_watch_maker
from yeto.infra.bus.nats_watches import LearnerWatches
from yeto.infra.bus.perms import watch_consumer
from yeto.infra.nats.server import NatsServer, ensure_streams
from yeto.schemas.subjects import (
    LEARNER_EVENTS,
    TAPE_SQL,
    command_subject,
    event_subject,
    keyframe_subject,
    learner_event_subject,
    log_subject,
)

RUN, OTHER = "r-sec", "r-other"
DELTAS = 6


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    users = bus_auth.prepare(state, ((RUN, "island-0"), (OTHER, "island-0")))
    srv = NatsServer(state / "nats", users_file=users).start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(state)))
        asyncio.run(_operator_setup(srv.url))
    yield srv, state
    srv.stop()


async def _operator_setup(url: str) -> None:
    bus = await connect(url, name="operator")
    await ensure_streams(bus)
    for run in (RUN, OTHER):   # a keyframe chunk of each run, as the syncer would publish it
        await bus.publish_raw(keyframe_subject(run, 0), f"weights of {run}".encode(), headers={"run": run})
    for chunk in range(DELTAS):  # big enough together that the server asks the learner's watch for flow control
        await bus.publish_raw(f"yeto.glob.{RUN}.0.d.{chunk}", bytes(7 * 2**20))
    await bus.close()


async def _raw(server, who: str = "island-0", run: str = RUN):
    """A plain nats-py client with a learner's credential; `errors` collects what the server reports."""
    srv, state = server
    ident = json.loads(bus_auth.learner_file(state, run, who).read_text())
    errors: list[str] = []
    got = asyncio.Event()

    async def on_error(e: Exception) -> None:
        errors.append(str(e))
        got.set()
    nc = await nats.connect(srv.url, user=ident["user"], password=ident["password"], inbox_prefix=ident["inbox_prefix"],
                            error_cb=on_error, allow_reconnect=False)
    return nc, errors, got


async def _violation(errors: list[str], got: asyncio.Event, subject: str) -> str:
    """The server's permission violation naming `subject` (it arrives asynchronously, as an -ERR; nats-py
    lower-cases it)."""
    async def seen() -> str:
        while True:
            hit = [e.lower() for e in errors if "permissions violation" in e.lower() and subject.lower() in e.lower()]
            if hit:
                return hit[0]
            got.clear()
            await got.wait()
    return await asyncio.wait_for(seen(), 10)


@pytest.mark.parametrize("subject", [
    command_subject("launcher", "LaunchRun"), command_subject("finalizer", "StopRun"),
    event_subject(RUN, "RunFinalized"), event_subject(RUN, "ArtifactWritten"), event_subject(RUN, "IslandUp"),
    learner_event_subject(OTHER, "LearnerProgress", "island-0"),   # another run's learner events
    *(learner_event_subject(RUN, t, "island-1") for t in LEARNER_EVENTS),   # progress, layout, final ack as another island
    *(event_subject(RUN, t) for t in LEARNER_EVENTS),       # with no learner in the subject (the claim only in the payload)
    learner_event_subject(RUN, "LearnerProgress", "*"),     # every island's at once
    f"yeto.frag.{RUN}.0.island-1",                            # pushing as another island
    f"yeto.frag.{OTHER}.0.island-0",                          # pushing into another run
    keyframe_subject(RUN, 0),                                 # forging a global
    log_subject(RUN, "island-1"), log_subject(OTHER, "island-0"),   # log lines as another island, into another run
    "$JS.API.STREAM.DELETE.YETO_EVT", "$JS.API.STREAM.PURGE.YETO_FRAG", "$JS.API.STREAM.CREATE.EVIL",
    "$JS.API.CONSUMER.DELETE.YETO_EVT.tape", TAPE_SQL,
])
def test_a_learner_credential_is_refused_what_is_not_its_own(server, subject):
    async def attempt():
        nc, errors, got = await _raw(server)
        try:
            await nc.publish(subject, b'{"run_id": "r-sec"}', reply=nc.new_inbox())
            await nc.flush()
            return await _violation(errors, got, subject)
        finally:
            await nc.close()

    assert "for publish to" in asyncio.run(attempt())


def test_deleting_the_event_stream_is_refused_and_the_stream_stays(server, monkeypatch):
    async def attempt():
        nc, errors, got = await _raw(server)
        try:
            with pytest.raises(nats.errors.Error):   # no responder may answer a request the server dropped
                await nc.request("$JS.API.STREAM.DELETE.YETO_EVT", b"", timeout=2)
            return await _violation(errors, got, "$JS.API.STREAM.DELETE.YETO_EVT")
        finally:
            await nc.close()

    assert asyncio.run(attempt())
    monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(server[1])))

    async def still_there():
        bus = await connect(server[0].url)
        info = await bus.js.stream_info("YETO_EVT")
        await bus.close()
        return info.config.name

    assert asyncio.run(still_there()) == "YETO_EVT"


@pytest.mark.parametrize("subject", [f"yeto.glob.{OTHER}.>", "yeto.>", ">", "_INBOX.>", f"_INBOX_{OTHER}_island-0.>",
                                     f"yeto.evt.{RUN}.>"])
def test_a_learner_cannot_subscribe_to_another_run_or_anyone_elses_inbox(server, subject):
    async def attempt():
        nc, errors, got = await _raw(server)
        try:
            await nc.subscribe(subject)
            await nc.flush()
            return await _violation(errors, got, subject)
        finally:
            await nc.close()

    assert "for subscription to" in asyncio.run(attempt())


def test_a_learner_cannot_read_another_runs_globals_through_a_consumer(server):
    other = keyframe_subject(OTHER, 0)

    async def attempt():
        nc, errors, got = await _raw(server)
        js = nc.jetstream(timeout=2)
        try:
            for config in (ConsumerConfig(name="peek"), None):      # named (filter in the subject) and unnamed
                with pytest.raises(nats.errors.Error):
                    await js.subscribe(other, stream="YETO_GKEY", ordered_consumer=True, config=config)
            named = await _violation(errors, got, f"$JS.API.CONSUMER.CREATE.YETO_GKEY.peek.{other}")
            bare = await _violation(errors, got, '"$JS.API.CONSUMER.CREATE.YETO_GKEY"')
            # its own run's filter in the subject and another run's in the body: no create passes the server at all
            sly = watch_consumer(RUN, "island-0")
            req = {"stream_name": "YETO_GKEY", "config": {"name": sly, "filter_subject": other, "ack_policy": "none"}}
            await nc.publish(f"$JS.API.CONSUMER.CREATE.YETO_GKEY.{sly}.yeto.glob.{RUN}.>", json.dumps(req).encode())
            return named, bare, await _violation(errors, got, f"$JS.API.CONSUMER.CREATE.YETO_GKEY.{sly}")
        finally:
            await nc.close()

    named, bare, smuggled = asyncio.run(attempt())
    assert "for publish to" in named and "for publish to" in bare and "for publish to" in smuggled


def test_a_learner_creates_no_consumer_so_the_streams_limits_stay_for_the_others(server, monkeypatch):
    """Issue 41: a learner created ~1000 durable consumers on its own filter until the streams' consumer limit broke
    every later island's watches. Now no create passes the server's permissions, not even under its own watch's name."""
    mine = [watch_consumer(OTHER, "island-0")]
    where = f"yeto.glob.{OTHER}.>"

    async def hog():
        nc, errors, got = await _raw(server, run=OTHER)
        created: list[str] = []
        try:
            for name in [*mine, "hog-1", "hog-2"]:
                req = {"stream_name": "YETO_GKEY", "config": {"durable_name": name, "name": name, "filter_subject": where,
                                                               "ack_policy": "explicit"}}
                try:
                    resp = await nc.request(f"$JS.API.CONSUMER.CREATE.YETO_GKEY.{name}.{where}", json.dumps(req).encode(),
                                            timeout=2)
                    created += [name] if "error" not in json.loads(resp.data) else []
                except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                    pass
            return created, await _violation(errors, got, "$JS.API.CONSUMER.CREATE.YETO_GKEY.hog-2")
        finally:
            await nc.close()

    created, refused = asyncio.run(hog())
    assert created == [] and "for publish to" in refused
    monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(server[1])))

    async def others_watch_and_clean_up() -> int:
        bus = await connect(server[0].url)
        try:
            seen: asyncio.Queue = asyncio.Queue()

            async def on_key(d) -> None:
                await seen.put(d)
            w = await bus.watch(f"yeto.glob.{RUN}.*.key.*", on_key, deliver="last_per_subject", headers_only=True)
            await asyncio.wait_for(seen.get(), 10)
            await w.close()
            for name in created:
                await bus.js.delete_consumer("YETO_GKEY", name)
            return len(created)
        finally:
            await bus.close()

    assert asyncio.run(others_watch_and_clean_up()) == 0


def test_a_learners_own_pushes_events_and_watches_work(server, monkeypatch):
    monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.learner_file(server[1], RUN, "island-0")))

    async def legit():
        bus = await connect(server[0].url, name="learner")
        seen: asyncio.Queue = asyncio.Queue()

        deltas_seen: asyncio.Queue = asyncio.Queue()

        async def on_key(d) -> None:
            await seen.put(d)

        async def on_delta(d) -> None:
            await deltas_seen.put(len(d.data))
        try:
            push = await bus.publish_raw(f"yeto.frag.{RUN}.0.island-0", b"chunk", msg_id=f"{RUN}-push")
            progress = await bus.publish_raw(learner_event_subject(RUN, "LearnerProgress", "island-0"), b"{}",
                                             msg_id=f"{RUN}-progress")
            for kind in ("LayoutDeclared", "LearnerFinalAck"):
                assert await bus.publish_raw(learner_event_subject(RUN, kind, "island-0"), b"{}", msg_id=f"{RUN}-{kind}") > 0
            watches = LearnerWatches(bus, RUN, "island-0", {"keyframes": on_key, "deltas": on_delta, "final": on_key})
            await watches.start()         # the launcher's serve (below) makes them: the learner only pulls
            assert watches.num_made == 1
            announced = await asyncio.wait_for(seen.get(), 10)
            payload = await bus.direct_last(keyframe_subject(RUN, 0))   # the learner's keyframe fetch
            assert payload is not None and payload[0] == announced.seq
            payload = payload[1:]
            sizes = [await asyncio.wait_for(deltas_seen.get(), 30) for _ in range(DELTAS)]
            assert sizes == [7 * 2**20] * DELTAS
            await watches.close()
            return push, progress, announced.headers, payload
        finally:
            await bus.close()

    async def with_launcher():
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(bus_auth.CREDS_ENV, str(bus_auth.service_file(server[1])))
            service, stop = await connect(server[0].url, name="launcher"), asyncio.Event()
        serving = asyncio.create_task(nats_watch_maker.serve(service, stop))
        try:
            return await legit()
        finally:
            stop.set()
            await serving
            await service.close()

    push, progress, headers, payload = asyncio.run(with_launcher())
    assert push > 0 and progress > 0 and headers["run"] == RUN
    assert payload is not None and payload[1] == f"weights of {RUN}".encode()
    log = (server[1] / "nats" / "nats-server.log").read_text()
    assert not [line for line in log.splitlines() if "Violation" in line and any(
        what in line for what in ("$JS.FC", "MSG.NEXT", "$JS.ACK", "_INBOX_r-sec"))]


def test_the_learner_cannot_use_the_plain_inbox_and_its_pushes_still_land(server):
    """With the standard `_INBOX` prefix a learner would get no acks at all: the credential dictates its own."""
    async def attempt():
        srv, state = server
        ident = json.loads(bus_auth.learner_file(state, RUN, "island-0").read_text())
        errors: list[str] = []
        got = asyncio.Event()

        async def on_error(e: Exception) -> None:
            errors.append(str(e))
            got.set()
        nc = await nats.connect(srv.url, user=ident["user"], password=ident["password"], error_cb=on_error,
                                allow_reconnect=False)
        try:
            with pytest.raises(nats.errors.Error):
                await nc.jetstream(timeout=2).publish(f"yeto.frag.{RUN}.0.island-0", b"x")
            return await _violation(errors, got, "_INBOX.")
        finally:
            await nc.close()

    assert "for subscription to" in asyncio.run(attempt())


def test_operator_deliver_policy_is_untouched(server, monkeypatch):
    """The operator still does stream administration (what `stack up` and the CLI need)."""
    monkeypatch.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(server[1])))

    async def admin():
        bus = await connect(server[0].url)
        info = await bus.js.add_consumer("YETO_EVT", ConsumerConfig(durable_name="op-check",
                                                                    deliver_policy=DeliverPolicy.ALL))
        await bus.js.delete_consumer("YETO_EVT", "op-check")
        await bus.close()
        return info.name

    assert asyncio.run(admin()) == "op-check"


@pytest.mark.parametrize("body", [{"seq": 1}, {"last_by_subj": keyframe_subject(OTHER, 0)},
                                  {"next_by_subj": keyframe_subject(OTHER, 0), "seq": 1},
                                  {"multi_last": [keyframe_subject(OTHER, 0)], "batch": 1}])
def test_the_bare_direct_get_whose_body_could_name_another_runs_keyframes_is_refused(server, body):
    """The bare `$JS.API.DIRECT.GET.YETO_GKEY` reads what its body names, which subject permissions cannot see
    (by sequence, `last_by_subj`, `next_by_subj`, `multi_last`: until this change each returned another run's
    chunk): a learner may not publish it at all, so nothing comes back and the server reports the violation."""
    async def attempt():
        nc, errors, got = await _raw(server)          # a learner of RUN
        api = "$JS.API.DIRECT.GET.YETO_GKEY"
        try:
            with pytest.raises(nats.errors.Error):   # no responder may answer a request the server dropped
                await nc.request(api, json.dumps(body).encode(), timeout=2)
            return await _violation(errors, got, f"publish to \"{api}\"")
        finally:
            await nc.close()

    assert "permissions violation" in asyncio.run(attempt())


@pytest.mark.parametrize("subject", [keyframe_subject(OTHER, 0), "yeto.glob.*.0.key.0", "yeto.glob.>",
                                     f"yeto.glob.{OTHER}.>", f"yeto.glob.{RUN}.0.d.0"])
def test_the_subject_form_reads_only_the_learners_own_runs_keyframes(server, subject, monkeypatch):
    """The learner's fetch names the chunk in the API subject, which the server checks: another run's chunk, a
    wildcard over runs, the deltas stream's subjects are permission violations, while its own chunk is read (and
    the server refuses a body on this form, so the body cannot name another subject: 408)."""
    async def attempt():
        nc, errors, got = await _raw(server)
        api = "$JS.API.DIRECT.GET.YETO_GKEY"
        try:
            own = await nc.request(f"{api}.{keyframe_subject(RUN, 0)}", b"", timeout=5)
            with_body = await nc.request(f"{api}.{keyframe_subject(RUN, 0)}",
                                         json.dumps({"last_by_subj": keyframe_subject(OTHER, 0)}).encode(), timeout=5)
            with pytest.raises(nats.errors.Error):
                await nc.request(f"{api}.{subject}", b"", timeout=2)
            return own, with_body, await _violation(errors, got, f"{api}.{subject}")
        finally:
            await nc.close()

    own, with_body, violation = asyncio.run(attempt())
    assert own.data == f"weights of {RUN}".encode()
    assert with_body.headers.get("Status") == "408" and not with_body.data
    assert "for publish to" in violation
