"""A head's stack (TLS, per-run credentials) with its components forked (infra/stack/forkserver.py): a component that
acts the moment it is up finds the stack's record, as the launcher must when the run is already waiting on the bus.

What failed before (2026-12-06, the cloud rehearsals with $YETO_FORK_SERVICES=1): `stack.up` wrote stack.json only
after the fork server had answered every child's pid, and a forked launcher handled the run's first StartIsland before
that (the laptop hands a head its run as soon as nats-server answers). It read no `ca_file`, so that island shipped
without the head's certificate (its learner: `CERTIFICATE_VERIFY_FAILED ... self-signed certificate`), and
bus_auth.reload_server found no nats-server to reload after issuing its credential (the server never loaded it: the
learner refused, authorization violation). A spawned launcher spent ~1 s importing first and did not lose that race.
"""
from __future__ import annotations

import json
import sys

import pytest

from tests.infra.fork_probe import RUN

PROBE = "probe"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_forked_component_acting_at_once_finds_the_record_its_ca_and_a_server_that_loads_its_credential(
        tmp_path, monkeypatch):
    from tests.waiting import wait_for
    from yeto.infra import stack
    from yeto.infra.nats.server import free_port
    from yeto.infra.stack import forkserver

    monkeypatch.setenv(forkserver.ENABLE_ENV, "1")
    monkeypatch.delenv("YETO_NATS_CREDS", raising=False)     # stack.up points this process at its operator's
    monkeypatch.delenv("YETO_NATS_CA", raising=False)
    state, out = tmp_path / "head", tmp_path / "probe.json"
    commands, fork_all, at_start = stack._commands, forkserver.fork_all, []

    def with_probe(rec, paths, url):        # tests/infra/fork_probe.py first: forked before the services
        return {PROBE: [sys.executable, "-m", "tests.infra.fork_probe", str(state), url, str(out)], **commands(rec, paths, url)}

    def recorded_first(*args, **kwargs):    # what a component that starts now can read
        at_start.append(stack.read_record(stack.StackPaths(state)))
        return fork_all(*args, **kwargs)
    monkeypatch.setattr(stack, "_commands", with_probe)
    monkeypatch.setattr(forkserver, "fork_all", recorded_first)
    rec = stack.up(state, port=free_port("0.0.0.0"), head_run=RUN, hosts=["127.0.0.1"])   # not a head's 4222: others'
    try:
        seen = wait_for(lambda: out.exists() and json.loads(out.read_text()), 120, "the probe's report",
                        detail=lambda: (state / "logs" / f"{PROBE}.log").read_text())
        assert seen["comm"] == f"yeto-{PROBE}", seen          # forked by the fork server, not spawned
        assert seen["record"] and seen["ca_file"] == rec["ca_file"] and seen["servers"] == ["nats-server"], json.dumps(seen)
        assert seen["connected"] == "yes", seen               # its credential loaded, the certificate pinned
        assert (state / "logs" / "forkserver.log").read_text() == ""
        assert at_start and at_start[0], "no stack record when the components started"
        assert at_start[0]["ca_file"] == rec["ca_file"] and at_start[0]["url"] == rec["url"]
        assert at_start[0]["pids"]["nats-server"] == rec["pids"]["nats-server"]
    finally:
        stack.down(state)
