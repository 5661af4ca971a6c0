"""Least privilege over the WAN path, rehearsed: a head stack (`yeto stack up --head`, TLS and users) in its namespace,
learners in island namespaces dialling its veth address with the files an island task ships. A learner credential
publishing LaunchRun, subscribing to another run or pushing as another island is refused by the server's permission
violation, and its own push still lands; without the CA, or with a wrong password, a learner cannot connect.
The same refusals over loopback, subject by subject: tests/security/test_security_bus.py."""
from __future__ import annotations

import asyncio
import json

import pytest
import sky

import rehearsal
import rehearsal_world
from waiting import wait_for
from yeto.infra import procs
from yeto.infra.bus import auth as bus_auth
from yeto.infra.bus import connect
from yeto.infra.head import records as heads
from yeto.services.launcher.backends.sky_tasks import CA_MOUNT, CREDS_MOUNT, head_task

RUN, OTHER = "r-perm", "r-perm-other"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def head(module_rehearsal_dir, tmp_path_factory):
    """The head (the task `yeto launch` rents, over the bundle it makes) with credentials issued for an island of
    RUN and one of OTHER; its URL, the laptop's bundle, the certificate to pin and the head's nats-server log."""
    laptop = tmp_path_factory.mktemp("laptop")
    bundle = heads.prepare_bundle(laptop, RUN, {})
    bus_auth.prepare(bundle, ((RUN, "island-0"), (OTHER, "island-0")))
    cert = heads.new_record(laptop, RUN, price_per_hour=0.0, launched_at=0.0)["ca_file"]
    api = rehearsal.RehearsalSky()
    api.launch_cluster(head_task(RUN, bundle), f"yeto-head-{RUN}", idle_minutes_to_autodown=5)
    url = f"tls://{api.cluster_address(f'yeto-head-{RUN}')}:4222"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(bus_auth.CREDS_ENV, str(bus_auth.operator_file(bundle)))
        mp.setenv("YETO_NATS_CA", str(cert))
        log = module_rehearsal_dir / f"cluster-yeto-head-{RUN}" / "run.log"
        wait_for(lambda: asyncio.run(_streams(url)), 120, "the head's streams over TLS from this machine", interval=0.5,
                 detail=log.read_text)
        yield url, bundle, cert, log.parent / "home" / ".yeto" / "head" / "logs" / "nats-server.log"


async def _streams(url: str) -> bool:
    try:
        bus = await connect(url, name="laptop", connect_timeout=2)
    except ConnectionError:
        return False
    try:
        return (await bus.js.stream_info("YETO_FRAG")).config.name == "YETO_FRAG"
    except Exception:  # noqa: BLE001 - stack up creates the streams just after the server listens
        return False
    finally:
        await bus.close()


def island(head, probe: list[str], *, creds=None, with_ca: bool = True) -> tuple[dict, str]:
    """An island-shaped task (credential and CA by file mount, paths in envs) running the probe; what it printed,
    and the island's address."""
    url, bundle, cert, _ = head
    mounts = {CREDS_MOUNT: str(creds or bus_auth.learner_file(bundle, RUN, "island-0"))}
    envs = {"YETO_NATS_URL": url, "YETO_NATS_CREDS": CREDS_MOUNT}
    if with_ca:
        mounts[CA_MOUNT], envs["YETO_NATS_CA"] = str(cert), CA_MOUNT
    task = sky.Task(name="probe", run=f"python3 tests/cloud/island_probe.py {' '.join(probe)}", envs=envs,
                    workdir=str(rehearsal.jobs.REPO))
    task.set_file_mounts(mounts)
    api = rehearsal.RehearsalSky()
    job = api.jobs_launch(task, "probe")
    status = wait_for(lambda: (s := rehearsal_world.job_status(api, job)) != "RUNNING" and s, 90, "the probe")
    assert status == "SUCCEEDED", api.jobs_logs(job)
    ip = rehearsal_world.record(rehearsal.jobs.rehearsal_dir())["jobs"][str(job)]["ip"]
    return json.loads(api.jobs_logs(job).strip().splitlines()[-1]), ip


def test_a_learner_is_refused_commands_other_runs_and_other_islands_and_its_own_push_lands(head):
    seen, _ = island(head, ["attacks", RUN, OTHER])
    assert "for publish to" in seen["launch"] and "launchrun" in seen["launch"]
    assert "for subscription to" in seen["other_run"] and OTHER in seen["other_run"]
    assert "for publish to" in seen["other_island"] and "island-1" in seen["other_island"]
    assert seen["own_push"]["stream"] == "YETO_FRAG" and seen["own_push"]["seq"] > 0 and seen["own_push"]["connected"]
    stack = json.loads((head[3].parents[1] / "stack.json").read_text())     # the head's stack goes on, every process
    assert all(procs.alive(pid, stack["started_at"][name]) for name, pid in stack["pids"].items()), stack["pids"]


def test_a_learner_without_the_ca_cannot_connect(head):
    seen, _ = island(head, ["connect"], with_ca=False)
    assert not seen["connected"] and "certificate verify failed" in seen["error"].lower()


def test_a_learner_with_a_wrong_password_cannot_connect(head, tmp_path):
    ident = json.loads(bus_auth.learner_file(head[1], RUN, "island-0").read_text())
    wrong = bus_auth.write_secret(tmp_path / "learner.json", json.dumps({**ident, "password": ident["password"][::-1]}))
    seen, ip = island(head, ["connect"], creds=wrong)
    refused = [line for line in head[3].read_text().splitlines() if f"{ip}:" in line and "authentication error" in line]
    assert not seen["connected"] and refused and f'User "learner-{RUN}-island-0"' in refused[0], seen["error"]


def test_with_the_ca_and_its_credential_the_learner_connects(head):
    assert island(head, ["connect"])[0] == {"connected": True, "error": ""}
