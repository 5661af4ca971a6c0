"""`yeto check`: clouds from SkyPilot's check (test doubles behind SkyApi, and SkyPilot's own in an empty HOME), a
real local stack and a real TLS head that answer or do not, what --gpu / --output need, and the exit status."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from yeto.cli.check_probes import MISSING, NO, OK, output_item
from yeto.cli.main import main
from yeto.infra import stack
from yeto.infra.bus import auth as bus_auth
from yeto.infra.head import records as heads
from yeto.infra.nats.server import NatsServer, TlsConfig, free_port
from yeto.services.launcher.backends.sky_api import SKY_API_ENV
from yeto.services.launcher.backends.sky_check import hint_line

pytestmark = pytest.mark.timeout(120)


def check(capsys, state, *argv: str) -> tuple[int, dict]:
    rc = main(["--state-dir", str(state), "check", "--json", *argv])
    out = json.loads(capsys.readouterr().out)
    return rc, {i["name"]: (i["status"], i["detail"]) for i in out["items"]} | {"_clouds": out["clouds"], "_ok": out["ok"]}


def test_check_names_the_clouds_skypilots_check_enables_and_why_a_named_one_is_not(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(SKY_API_ENV, "check_sky:AwsOnly")
    rc, items = check(capsys, tmp_path, "--gpu", "aws:8xa100,gcp:8xh100")
    assert rc == 1 and items["_ok"] is False
    assert items["clouds"][0] == OK and "aws" in items["clouds"][1] and "gcp" not in items["clouds"][1]
    assert items["gcp"] == (MISSING, "GCP credentials not found. Run: gcloud init")
    assert "aws" not in items                        # enabled: nothing to say about it
    assert check(capsys, tmp_path, "--gpu", "aws:8xa100")[0] == 0


def test_an_api_server_that_cannot_start_is_missing_for_a_cloud_launch(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(SKY_API_ENV, "check_sky:AwsWithoutServer")
    rc, items = check(capsys, tmp_path, "--gpu", "aws:8xa100")
    assert rc == 1 and items["clouds"][0] == OK
    assert items["skypilot"] == (MISSING, "SkyPilot's API server cannot start here: TypeError: boom")
    rc, items = check(capsys, tmp_path)
    assert rc == 0 and items["skypilot"][0] == NO      # a local run does not need it


def test_no_cloud_is_fine_for_a_local_run_and_missing_for_a_cloud_one(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(SKY_API_ENV, "check_sky:NoCloud")
    rc, items = check(capsys, tmp_path)
    assert rc == 0 and items["clouds"][0] == NO and items["clouds"][1].startswith("no cloud enabled")
    assert items["nats-server"][0] == OK and items["torch"][0] == OK
    rc, items = check(capsys, tmp_path, "--gpu", "aws:1xa100")
    assert rc == 1 and items["clouds"][0] == MISSING
    assert rc == main(["--state-dir", str(tmp_path), "check", "--gpu", "aws:1xa100"])   # the table: same status
    assert "no cloud enabled" in capsys.readouterr().out


def test_a_check_that_never_answers_ends_in_one_line_at_the_timeout(capsys, tmp_path, monkeypatch):
    from check_sky import Hangs

    monkeypatch.setenv(SKY_API_ENV, "check_sky:Hangs")
    started = time.monotonic()
    try:
        rc = main(["--state-dir", str(tmp_path), "check", "--timeout", "1"])
    finally:
        Hangs.release.set()                          # the abandoned check thread ends with the test
    out = capsys.readouterr().out
    assert rc == 0 and time.monotonic() - started < 30
    assert [ln for ln in out.splitlines() if "clouds" in ln] == [
        "  no      clouds       SkyPilot's check gave no answer within 1s (offline, or a cloud's API hangs); "
        "`sky check` says which"]


def test_hf_token_is_reported_set_never_shown(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(SKY_API_ENV, "check_sky:NoCloud")
    monkeypatch.setenv("HF_TOKEN", "hf_do_not_print_me")
    main(["--state-dir", str(tmp_path), "check"])
    text = capsys.readouterr().out
    rc, items = check(capsys, tmp_path, "--output", "hf://org/repo")
    assert "hf_do_not_print_me" not in text + json.dumps(items)
    assert rc == 0 and items["HF_TOKEN"][1].startswith("set") and items["--output"][0] == OK


@pytest.mark.parametrize("output, cloud_run, status, says", [
    ("", True, OK, "yeto pull RUN"),
    ("/tmp/out", False, OK, "local path"),
    ("/tmp/out", True, NO, "a path on the head VM"),
    ("memory://bucket/x", True, OK, "installed"),
    ("ftpx://bucket/x", False, MISSING, "unknown store scheme"),
    ("hf://org/repo", True, MISSING, "needs HF_TOKEN"),
])
def test_output_says_where_the_artifact_goes_and_what_that_needs(monkeypatch, output, cloud_run, status, says):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    item = output_item(output, cloud_run)
    assert item.status == status and says in item.detail


@pytest.fixture(scope="module")
def state_with_stack_and_heads(tmp_path_factory):
    """A real local stack, a real head nats-server (TLS, the bundle's users) recorded as up, one recorded as up that
    is gone, and one taken down."""
    saved = {k: os.environ.get(k) for k in (bus_auth.CREDS_ENV, "YETO_NATS_CA")}
    state = tmp_path_factory.mktemp("state")
    stack.up(state)
    bundle = heads.prepare_bundle(state, "r-head", {})
    tls = TlsConfig(cert_file=bundle / "tls" / "server.pem", key_file=bundle / "tls" / "server.key")
    head = NatsServer(tmp_path_factory.mktemp("head"), tls=tls, users_file=bus_auth.users_file(bundle)).start()
    heads.write_head(state, {**heads.new_record(state, "r-head", price_per_hour=0.2, launched_at=1.0),
                             "url": head.url, "state": "up"})
    heads.prepare_bundle(state, "r-gone", {})
    heads.write_head(state, {**heads.new_record(state, "r-gone", price_per_hour=0.2, launched_at=2.0),
                             "url": f"tls://127.0.0.1:{free_port()}", "state": "up"})
    heads.write_head(state, heads.new_record(state, "r-done", price_per_hour=0.2, launched_at=3.0) | {"state": "down"})
    yield state
    head.stop()
    stack.down(state)
    for k, v in saved.items():               # stack.up made this process the local stack's operator
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def test_check_reaches_the_local_stack_and_each_recorded_head(capsys, monkeypatch, state_with_stack_and_heads):
    monkeypatch.setenv(SKY_API_ENV, "check_sky:NoCloud")
    rc, items = check(capsys, state_with_stack_and_heads)
    assert items["local stack"][0] == OK and items["local stack"][1].endswith("answers")
    assert items["head r-head"][0] == OK and items["head r-head"][1].endswith(": answers")
    assert items["head r-gone"][0] == NO and "does not answer" in items["head r-gone"][1]
    assert "sky status yeto-head-r-gone" in items["head r-gone"][1]
    assert items["head r-done"][0] == OK and items["head r-done"][1].startswith("down")
    assert rc == 0                                 # a head that is gone does not stop a local run


# SkyPilot 0.9.3's hint for AWS without boto3, verbatim: sentences, then commands on lines of their own
AWS_HINT = ("AWS dependencies are not installed. Run the following commands:\n      $ pip install skypilot[aws]\n"
            "    Credentials may also need to be set. Run the following commands:\n      $ aws configure\n"
            "      $ aws configure list  # Ensure that this shows identity is set.\n"
            "    For more info: https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-quickstart.html")


def test_a_long_skypilot_hint_is_shortened_to_whole_sentences_and_commands_never_mid_word():
    line = hint_line(AWS_HINT)
    assert line == ("AWS dependencies are not installed. Run the following commands: $ pip install skypilot[aws]; "
                    "Credentials may also need to be set. Run the following commands: $ aws configure "
                    "(`sky check` has the rest)")
    assert hint_line(AWS_HINT, limit=100) == ("AWS dependencies are not installed. Run the following commands: "
                                              "$ pip install skypilot[aws] (`sky check` has the rest)")
    assert hint_line(AWS_HINT, limit=50) == "AWS dependencies are not installed. (`sky check` has the rest)"  # no bare colon
    assert hint_line("Failed to import vast. To install, run: pip install skypilot[vast]") == \
        "Failed to import vast. To install, run: pip install skypilot[vast]"          # short enough: whole
    assert hint_line("x" * 300) == "x" * 300                                          # one sentence is never cut


def test_skypilots_own_check_in_a_home_without_credentials_says_no_cloud_enabled(tmp_path):
    """RealSky for real: SkyPilot's check of every cloud, in this process (no API server started), offline."""
    pytest.importorskip("sky")
    env = {k: v for k, v in os.environ.items() if k != SKY_API_ENV
           and not k.startswith(("AWS_", "GOOGLE_", "AZURE_", "KUBECONFIG", "SKYPILOT_", "LAMBDA_", "RUNPOD_"))}
    env["HOME"] = str(tmp_path / "home")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "yeto.cli.main", "--state-dir", str(tmp_path / "state"), "check",
                           "--json"], capture_output=True, text=True, env=env, timeout=100)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    clouds = out["clouds"]
    assert {"aws", "gcp", "azure", "kubernetes"} <= set(clouds) and all(why for why in clouds.values())
    assert not [why for why in clouds.values() if "…" in why]          # hints are shortened to whole sentences
    assert [i["detail"] for i in out["items"] if i["name"] == "clouds"] == [
        "no cloud enabled: set up a cloud's credentials (`sky check` shows how for each)"]
    # SkyPilot's API server (every launch goes through it) either can start here, or says why in one line
    server = [(i["status"], i["detail"]) for i in out["items"] if i["name"] == "skypilot"]
    assert server == [] or (server[0][0] == NO and server[0][1].startswith("SkyPilot's API server cannot start"))
    assert took < 90, f"SkyPilot's check took {took:.0f}s"
