"""The rehearsal's SkyApi on its own, with real `sky.Task` objects: a job sees only what its task ships (HOME of
file mounts, env and the world's own, rehearsal_world.ENV; workdir, its own namespace), reaches the head's veth
address, ends with the status its process gives, and a cancel is recorded and leaves none of its processes (even one
in a session of its own)."""
from __future__ import annotations

import json
import os

import pytest
import sky

import rehearsal
import rehearsal_world
from waiting import wait_for
from yeto.infra import procs

SHOW = ("python3 -c 'import json, os, socket, sys; print(json.dumps({\"env\": dict(os.environ), \"cwd\": os.getcwd(), "
        "\"home\": sorted(str(p) for p in __import__(\"pathlib\").Path.home().rglob(\"*\") if \"sky_workdir\" not in str(p)), "
        "\"nics\": [n for _, n in socket.if_nameindex()]}))'")


def _status(sky_api, job_id: int) -> str:
    return next(j.status for j in sky_api.jobs_queue() if j.job_id == job_id)


def _ended(sky_api, job_id: int) -> str:
    return wait_for(lambda: (s := _status(sky_api, job_id)) not in ("RUNNING",) and s, 60, f"job {job_id} ending")


def test_a_job_sees_only_its_mounts_env_and_workdir_in_its_own_namespace(rehearsal_dir, tmp_path):
    (tmp_path / "creds.json").write_text('{"user": "u"}')
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.jsonl").write_text("{}\n")
    task = sky.Task(name="show", setup="set -e\npip install -q nothing", run=SHOW, envs={"YETO_NATS_URL": "tls://x:4222"},
                    workdir=str(tmp_path))
    task.set_file_mounts({"~/.yeto/island/learner.json": str(tmp_path / "creds.json"), "~/.yeto/data/d": str(tmp_path / "data")})
    api = rehearsal.RehearsalSky()
    job = api.jobs_launch(task, "show")
    assert _ended(api, job) == "SUCCEEDED", api.jobs_logs(job)
    seen = json.loads(api.jobs_logs(job).strip().splitlines()[-1])
    home = seen["env"]["HOME"]
    assert [p.removeprefix(home) for p in seen["home"]] == ["/.yeto", "/.yeto/data", "/.yeto/data/d", "/.yeto/data/d/rows.jsonl",
                                                            "/.yeto/island", "/.yeto/island/learner.json"]
    assert os.path.realpath(seen["cwd"]) == str(tmp_path) and seen["nics"] == ["lo", "eth0"]
    shell = {"PWD", "SHLVL", "_", "OLDPWD", "LC_CTYPE"}   # what bash and python (C locale coercion) add
    assert set(seen["env"]) - shell == {"YETO_NATS_URL", "PATH", "HOME", "SKYPILOT_NUM_NODES", "SKYPILOT_NODE_RANK",
                                        "SKYPILOT_NODE_IPS", "SKYPILOT_TASK_ID", "SKYPILOT_NUM_GPUS_PER_NODE",
                                        "YETO_SKY_API", "YETO_REHEARSAL_DIR", *rehearsal_world.ENV}
    assert seen["env"]["PATH"].split(":")[0] == rehearsal.jobs.venv_bin()


def test_an_absolute_mount_target_is_refused_and_leaves_no_namespace(rehearsal_dir, tmp_path):
    (tmp_path / "f").write_text("x")
    task = sky.Task(name="abs", run="true")
    task.set_file_mounts({"/yeto/auth/learner.json": str(tmp_path / "f")})
    with pytest.raises(ValueError, match="not under ~/"):
        rehearsal.RehearsalSky().jobs_launch(task, "abs")
    tag = rehearsal_world.record(rehearsal_dir)["world"]["tag"]
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"yreh-{tag}-") and not n.endswith("-root")]
    assert rehearsal.RehearsalSky().jobs_launch(sky.Task(name="next", run="true"), "next") == 1   # the id is free again


def test_status_follows_the_process_and_bad_setup_never_runs(rehearsal_dir, tmp_path):
    api = rehearsal.RehearsalSky()
    failed = api.jobs_launch(sky.Task(name="fails", run="exit 3"), "fails")
    bad_setup = api.jobs_launch(sky.Task(name="bad", setup="if then", run=f"touch {tmp_path}/ran"), "bad")
    assert _ended(api, failed) == "FAILED"
    assert _status(api, bad_setup) == "FAILED_SETUP" and not (tmp_path / "ran").exists()


def test_cancel_is_recorded_and_kills_every_process_of_the_job(rehearsal_dir, tmp_path):
    api = rehearsal.RehearsalSky()
    run = f"setsid sleep 600 & echo $! > {tmp_path}/escaped; sleep 600"   # one child leaves the job's process group
    job = api.jobs_launch(sky.Task(name="long", run=run), "long")
    wait_for(lambda: (tmp_path / "escaped").exists() and (tmp_path / "escaped").read_text().strip(), 30, "the job started")
    escaped = int((tmp_path / "escaped").read_text())
    rec = rehearsal_world.record(rehearsal_dir)["jobs"][str(job)]
    assert _status(api, job) == "RUNNING" and procs.alive(rec["pid"]) and procs.alive(escaped)
    api.jobs_cancel([job])
    state = rehearsal_world.record(rehearsal_dir)
    assert state["cancels"] == [[job]] and _status(api, job) == "CANCELLED"
    assert not procs.alive(rec["pid"]) and not procs.alive(escaped)
    assert not os.path.exists(f"/run/netns/{rec['ns']}")


def test_a_job_reaches_the_heads_veth_address_and_down_removes_the_head(rehearsal_dir):
    api = rehearsal.RehearsalSky()
    serve = "python3 -c 'import socket; s = socket.create_server((\"0.0.0.0\", 4222)); c, a = s.accept(); c.sendall(b\"head\")'"
    api.launch_cluster(sky.Task(name="head", run=f"{serve}; sleep 600"), "yeto-head-r", idle_minutes_to_autodown=5)
    address = api.cluster_address("yeto-head-r")
    assert address and address.endswith(".2")
    dial = (f"python3 -c 'import socket, time\nfor _ in range(200):\n try: print(socket.create_connection((\"{address}\", 4222))"
            ".recv(4).decode()); break\n except OSError: time.sleep(0.05)'")
    job = api.jobs_launch(sky.Task(name="dial", run=dial), "dial")
    assert _ended(api, job) == "SUCCEEDED" and api.jobs_logs(job).strip() == "head"
    head = rehearsal_world.record(rehearsal_dir)["clusters"]["yeto-head-r"]
    api.down_cluster("yeto-head-r")
    assert api.cluster_address("yeto-head-r") is None and not procs.alive(head["pid"])
    assert not os.path.exists(f"/run/netns/{head['ns']}")


def test_an_island_finds_the_laptops_folders_empty_and_reads_only_what_shipped(rehearsal_dir, tmp_path):
    model = tmp_path / "laptop" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"shipped": true}')
    rehearsal_world.hide(rehearsal_dir, [tmp_path / "laptop"])
    task = sky.Task(name="hidden", run=f"test -e {model}/config.json && echo seen || echo hidden; cat ~/.yeto/model/config.json")
    task.set_file_mounts({"~/.yeto/model": str(model)})
    api = rehearsal.RehearsalSky()
    job = api.jobs_launch(task, "hidden")
    assert _ended(api, job) == "SUCCEEDED", api.jobs_logs(job)
    assert api.jobs_logs(job).split() == ["hidden", '{"shipped":', "true}"]
    assert (model / "config.json").exists()             # hidden from the island only
