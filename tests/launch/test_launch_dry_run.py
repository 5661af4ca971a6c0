"""`yeto launch --dry-run` for every fleet (local, explicit cloud, planned) prints the plan and starts, rents and writes
nothing; a cloud launch asks once on a terminal and refuses elsewhere without --yes; SkyPilot's API server never holds
the caller's stdout; SkyPilot's colour codes never reach Yeto's messages."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from yeto.cli.launch.confirm import rent_or_not, strip_ansi
from yeto.cli.main import main

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "services" / "planner" / "fixtures" / "catalog"
CALLS: list[str] = []

pytestmark = pytest.mark.timeout(180)


class RecordingSky:
    """Stands in for SkyPilot ($YETO_SKY_API): any call is recorded, and fails, so a dry run that made one is caught."""

    def __getattr__(self, name: str):
        def call(*args, **kwargs):
            CALLS.append(name)
            raise RuntimeError(f"SkyPilot was called: {name}")
        return call


@pytest.fixture(scope="module")
def material(tmp_path_factory):
    sys.path.insert(0, str(REPO / "tests" / "learner"))
    from learner_tiny import write_chat_jsonl, write_model_dir

    root = tmp_path_factory.mktemp("dry-run")
    return write_model_dir(root / "model"), write_chat_jsonl(root / "chat.jsonl", 40)


@pytest.fixture
def sky(monkeypatch):
    CALLS.clear()
    monkeypatch.setenv("YETO_SKY_API", f"{__name__}:RecordingSky")
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    return CALLS


BEFORE: set[int] = set()     # this process's children before the last launch (another file's fixtures keep some)


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def launch(state: Path, material, *flags: str) -> int:
    model, data = material
    BEFORE.clear()
    BEFORE.update(children())
    return main(["--state-dir", str(state), "launch", "--model", str(model), "--data", str(data), "--seq-len", "64",
                 "--max-steps", "20", "--weights-gb", "16", "--catalog-dir", str(CATALOG), "--run-id", "r-dry", *flags])


def nothing_started(state: Path) -> None:
    assert not state.exists(), sorted(p.name for p in state.iterdir())     # no stack, no tape, no head record
    assert children() - BEFORE == set(), "the dry run left a process behind"


def test_a_local_dry_run_prints_config_islands_head_and_estimate(tmp_path, material, sky, capsys):
    assert launch(tmp_path / "state", material, "--gpu", "local:1xcpu,local:1xcpu", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "train: model=" in out and "seq_len=64" in out and "limits: max_steps=20" in out
    assert "island 0: local:1xcpu ($0.00/hr)" in out and "island 1: local:1xcpu" in out
    assert f"Head: the local stack under {tmp_path / 'state'}" in out
    assert "Estimate: ~" in out and "$0.00 at $0.00/hr" in out and "SkyPilot tasks" not in out
    assert "nothing was started, rented or written" in out
    nothing_started(tmp_path / "state")
    assert sky == []


def test_a_cloud_dry_run_shows_the_head_and_each_island_s_skypilot_task_and_calls_no_skypilot(tmp_path, material, sky,
                                                                                               capsys):
    import yaml

    assert launch(tmp_path / "state", material, "--gpu", "aws:8xa100-80gb@us-east-1,aws:8xa100-80gb@us-east-1", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "island 0: aws:8xa100-80gb@us-east-1 ($" in out and ", spot)" in out
    assert "Head: head " in out and "on-demand, rented first" in out and "Estimate: ~" in out
    tasks = out.split("SkyPilot tasks:\n", 1)[1].split("dry run:", 1)[0]
    blocks = [yaml.safe_load("\n".join(line[4:] for line in b.splitlines()[1:])) for b in tasks.split("  # ")[1:]]
    assert [b["name"] for b in blocks] == ["yeto-head-r-dry", "yeto-r-dry-island-0-g0", "yeto-r-dry-island-1-g0"]
    assert blocks[1]["resources"]["accelerators"] == {"A100-80GB": 8} and blocks[1]["resources"]["use_spot"] is True
    assert blocks[0]["resources"]["use_spot"] is False and "stack up --head --run-id r-dry" in blocks[0]["run"]
    nothing_started(tmp_path / "state")
    assert sky == []


def test_a_planned_dry_run_plans_here_and_shows_the_planner_s_fleet_and_its_tasks(tmp_path, material, sky, capsys):
    assert launch(tmp_path / "state", material, "--budget", "40", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "Fleet for" in out and "Estimate: ~" in out and "# island 0 (`sky jobs launch`" in out
    assert not (tmp_path / "state" / "stack.json").exists() and not (tmp_path / "state" / "heads").exists()
    assert sky == []


def test_a_cloud_launch_without_a_terminal_refuses_naming_yes_before_anything_is_rented(tmp_path, material, sky, capsys):
    assert launch(tmp_path / "state", material, "--gpu", "aws:8xa100-80gb@us-east-1", "--max-spend", "5") == 2
    out, err = capsys.readouterr()
    assert "--yes" in err and "SkyPilot tasks:" in out            # the plan shown, then the refusal
    assert sky == [] and not (tmp_path / "state" / "heads").exists()


def test_the_question_is_asked_once_on_a_terminal_and_yes_skips_it():
    class Args:
        confirm = False

    asked: list[str] = []
    assert rent_or_not(Args(), "Rent?", ask=lambda q: asked.append(q) or "y", interactive=True)
    assert not rent_or_not(Args(), "Rent?", ask=lambda q: asked.append(q) or "", interactive=True)
    assert asked == ["Rent? [y/N] ", "Rent? [y/N] "]
    Args.confirm = True
    assert rent_or_not(Args(), "Rent?", ask=lambda q: pytest.fail("asked under --yes"), interactive=False)


def test_a_daemon_started_detached_does_not_hold_the_caller_s_stdout(tmp_path):
    """What SkyPilot's API server start does (a shell that starts a long-lived process), inside detached_output: the
    pipe on the caller's stdout closes when the caller exits, as `yeto launch ... | cat` needs; without it, it does not."""
    pid_file = tmp_path / "daemon.pid"
    script = ("import subprocess, sys\nfrom yeto.cli.launch.confirm import detached_output\n"
              "detached = sys.argv[1] == 'detached'\n"
              "import contextlib\nwith (detached_output() if detached else contextlib.nullcontext()):\n"
              f"    p = subprocess.Popen('sleep 600', shell=True, start_new_session=True)\n"
              f"open({str(pid_file)!r}, 'w').write(str(p.pid))\nprint('launched')\n")
    for mode, closes in (("detached", True), ("inherited", False)):
        proc = subprocess.Popen([sys.executable, "-c", script, mode], stdout=subprocess.PIPE)
        try:
            proc.wait(timeout=60)
            daemon = int(pid_file.read_text())
            assert psutil.pid_exists(daemon)
            if closes:
                assert proc.stdout.read() == b"launched\n"      # EOF: no other process holds the pipe's write end
            else:
                os.set_blocking(proc.stdout.fileno(), False)
                assert proc.stdout.read() == b"launched\n" and proc.stdout.read() is None    # open: a read would block
        finally:
            os.killpg(daemon, signal.SIGKILL)       # the shell and its sleep: their own session
            proc.stdout.close()


def test_skypilot_s_colour_codes_are_stripped_from_yeto_s_error_lines(capsys, monkeypatch):
    coloured = "\x1b[31mSkyPilot: no cloud is enabled\x1b[0m; run \x1b[1msky check\x1b[0m"
    assert strip_ansi(coloured) == "SkyPilot: no cloud is enabled; run sky check"

    def fail(args):
        raise ConnectionError(coloured)

    import yeto.cli.runs as runs
    monkeypatch.setattr(runs, "run_status", fail)
    assert main(["status"]) == 1
    assert capsys.readouterr().err == "yeto: error: SkyPilot: no cloud is enabled; run sky check\n"


def _rates(out: str) -> tuple[float, float]:
    """(the estimate's $/hr, the islands' $/hr summed) from a dry run's plan."""
    import re
    estimate = float(re.search(r"^Estimate: .* at \$([0-9.]+)/hr", out, re.M).group(1))
    islands = sum(float(x) for x in re.findall(r"^  island \d+: \S+ \(\$([0-9.]+)/hr", out, re.M))
    return estimate, islands


def test_the_estimate_counts_every_head_vm_at_the_sized_head_s_price(tmp_path, material, sky, capsys):
    fleet = "aws:8xa100-80gb@us-east-1,aws:8xa100-80gb@us-east-1"
    assert launch(tmp_path / "one", material, "--gpu", fleet, "--dry-run") == 0
    one, islands = _rates(capsys.readouterr().out)
    assert launch(tmp_path / "three", material, "--gpu", fleet, "--dry-run", "--head-nodes", "3") == 0
    three, same = _rates(capsys.readouterr().out)
    head = one - islands                     # the sized head VM's price (the 16 GB model needs more than the smallest)
    assert same == pytest.approx(islands) and head > 0
    assert three == pytest.approx(islands + 3 * head, abs=0.011)     # two more VMs of that type, rounded to cents
    assert sky == []
