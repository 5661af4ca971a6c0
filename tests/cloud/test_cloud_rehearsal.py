"""The cloud path rehearsed end to end: `yeto launch --gpu aws:1xt4,aws:1xt4` from this machine's namespace (the
laptop) rents the head through the rehearsal's SkyApi (its stack in a namespace of its own, TLS on its veth
address); the head's launcher starts each island as a managed job in another namespace, with only what its task
ships (the laptop's folders, its --model and --data among them, are hidden: they reach an island through the
head). The run finishes and finalizes, `launch --wait` brings its tape and artifact home and `yeto sql` answers
with the head gone; a second run resumes from it (the head seeds from the shipped parent); `yeto down` of a third
run cancels every island job and leaves none of its processes.
(The learners train on CPU here: the rehearsal has no T4, and a learner takes what the machine has.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rehearsal
import rehearsal_world
from rehearsal_net import pids
from waiting import wait_for

sys.path.insert(0, str(Path(__file__).parents[1] / "learner"))
sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))
import learner_tiny
from e2e_stack import TRAIN_FLAGS

pytestmark = pytest.mark.slow
YETO = str(Path(sys.executable).parent / "yeto")
ISLANDS = "aws:1xt4,aws:1xt4"
TOKEN = "hf_rehearsal_not_a_real_token"     # the laptop's HF_TOKEN: it reaches the islands by file only


class Laptop:
    """The user's machine: `yeto` with its own state dir, SkyPilot stood in for by the rehearsal."""

    def __init__(self, home: Path, world: Path, model: Path, data: Path):
        self.home, self.world, self.model, self.data = home, world, model, data
        self.env = {**os.environ, "YETO_HOME": str(home), "PYTHONUNBUFFERED": "1", "HF_TOKEN": TOKEN}

    def yeto(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([YETO, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def launch(self, run_id: str, *flags: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.yeto("launch", "--gpu", ISLANDS, "--model", str(self.model), "--data", str(self.data), *TRAIN_FLAGS,
                         "--run-id", run_id, "--yes", *flags, timeout=timeout)

    def islands(self, run_id: str) -> list[dict]:
        jobs = rehearsal_world.record(self.world)["jobs"].values()
        return sorted((j for j in jobs if j["name"].startswith(f"yeto-{run_id}-island-")), key=lambda j: j["name"])

    def story(self) -> str:
        """The tail of every log of the world (the heads' stacks, the islands' runs)."""
        logs = sorted(self.world.rglob("run.log")) + sorted(self.world.rglob(".yeto/head/logs/*.log"))
        return "\n".join(f"--- {p.relative_to(self.world)}\n{p.read_text(errors='replace')[-3000:]}" for p in logs)


@pytest.fixture(scope="module")
def laptop(module_rehearsal_dir, tmp_path_factory) -> Laptop:
    root = tmp_path_factory.mktemp("laptop")
    rehearsal_world.hide(module_rehearsal_dir, [root])    # islands read only what their task ships: model and data too
    return Laptop(root / "home", module_rehearsal_dir, learner_tiny.write_model_dir(root / "model"),
                  learner_tiny.write_chat_jsonl(root / "chat.jsonl", 300))


@pytest.mark.timeout(600)
def test_a_two_island_cloud_run_finalizes_and_its_tape_and_artifact_come_home(laptop):
    run, started = "cloud-r1", time.monotonic()
    done = laptop.launch(run, "--max-steps", "16", "--wait", timeout=500)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{laptop.story()}"
    print(f"{run}: launch --wait took {time.monotonic() - started:.0f}s:\n{done.stdout}")
    islands = laptop.islands(run)
    assert [j["name"] for j in islands] == [f"yeto-{run}-island-0-g0", f"yeto-{run}-island-1-g0"]
    assert len({j["ns"] for j in islands}) == 2 and len({j["ip"] for j in islands}) == 2
    for i, job in enumerate(islands):     # each island got only what its task ships; secrets by file, never in envs
        home = Path(job["dir"]) / "home"
        files = sorted(str(p.relative_to(home)) for p in (home / ".yeto").rglob("*") if p.is_file())
        model = sorted(f".yeto/model/model/{p.relative_to(laptop.model)}" for p in laptop.model.rglob("*") if p.is_file())
        assert model and files == sorted([*model, ".yeto/data/chat.jsonl", ".yeto/island/ca.pem", ".yeto/island/env.json",
                                          ".yeto/island/learner.json"])
        assert json.loads(job["envs"]["YETO_RECIPE"])["model"] == "~/.yeto/model/model"
        assert json.loads((home / ".yeto/island/env.json").read_text()) == {"HF_TOKEN": TOKEN}
        assert json.loads((home / ".yeto/island/learner.json").read_text())["user"] == f"learner-{run}-island-{i}"
        assert (home / ".yeto/island/env.json").stat().st_mode & 0o777 == 0o600
        assert TOKEN not in json.dumps(job["envs"]) and TOKEN not in (Path(job["dir"]) / "run.log").read_text()
        # one rank: the learner itself, no torchrun in front of it (services/launcher/backends/sky_tasks.py)
        assert (Path(job["dir"]) / "run.sh").read_text().startswith("python3 -m yeto.learners.torch ")
    assert f"copied run {run} back" in done.stdout, done.stdout     # the end of `launch --wait` brought them home
    head = json.loads((laptop.home / "heads" / run / "head.json").read_text())
    assert head["state"] == "copied" and head["url"].startswith("tls://10.236.")
    assert (laptop.home / "heads" / run / "tape.duckdb").exists()
    artifact = laptop.home / "runs" / run / "artifact"
    assert any(p.suffix == ".safetensors" for p in (artifact / "artifact").iterdir()), sorted(artifact.rglob("*"))
    # the run ended: no island job runs on (each finished, or the head cancelled it), none of their processes is left
    api, cancelled = rehearsal.RehearsalSky(), {i for call in rehearsal_world.record(laptop.world)["cancels"] for i in call}
    ended = {j["id"]: rehearsal_world.job_status(api, j["id"]) for j in islands}
    assert all(s == "SUCCEEDED" or (s == "CANCELLED" and i in cancelled) for i, s in ended.items()), ended
    assert not [j["ns"] for j in islands if Path(f"/run/netns/{j['ns']}").exists() and pids(j["ns"])]
    wait_for(lambda: api.cluster_address(head["cluster"]) is None, 120, "the head to go once the tape was home",
             interval=0.5, detail=laptop.story)
    print(f"{run}: launch to the head gone {time.monotonic() - started:.0f}s")
    # the head's launcher reads the fleet's status at most every QUEUE_S (15 s by default; its poll asks every 1 s)
    polls: dict[int, list[float]] = {}
    for at, pid in rehearsal_world.record(laptop.world)["queue_calls"]:
        polls.setdefault(pid, []).append(at)
    gaps = [b - a for pid, ats in polls.items() if pid != os.getpid() for a, b in zip(ats, ats[1:])]
    assert len(polls) >= 2 and min(gaps, default=rehearsal_world.QUEUE_S) >= rehearsal_world.QUEUE_S - 0.5, polls
    query = f"select type from events where run_id = '{run}' and type = 'RunFinalized'"
    rows = laptop.yeto("sql", "--run", run, query, "--format", "csv")      # from the copy: no head is up
    assert rows.returncode == 0 and "RunFinalized" in rows.stdout, rows.stdout + rows.stderr
    status = laptop.yeto("status", run)
    assert status.returncode == 0 and "finalized" in status.stdout.lower(), status.stdout + status.stderr
    leaked = laptop.yeto("sql", "--run", run, f"select count(*) from events where payload like '%{TOKEN}%'", "--format", "csv")
    assert leaked.returncode == 0 and leaked.stdout.split()[-1] == "0" and TOKEN not in done.stdout + done.stderr


@pytest.mark.timeout(600)
def test_a_cloud_run_resumes_from_a_cloud_parent_whose_artifact_its_head_seeds_from(laptop):
    run, parent = "cloud-r3", laptop.home / "runs" / "cloud-r1" / "artifact"
    assert (parent / "manifest.json").is_file(), "cloud-r1 (the first test) brought its artifact home"
    done = laptop.launch(run, "--max-steps", "24", "--resume-from", "cloud-r1", "--wait", timeout=500)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{laptop.story()}"
    shipped = laptop.home / "heads" / run / "bundle" / "parent" / "artifact"
    assert sorted(p.relative_to(shipped).as_posix() for p in shipped.rglob("*") if p.is_file()) == [
        "manifest.json", *sorted(f"resume/{p.name}" for p in (parent / "resume").iterdir())]     # not artifact/
    for job in laptop.islands(run):      # the learners go on from the parent's step
        assert json.loads(job["envs"]["YETO_RECIPE"])["start_step"] == 16
    query = f"select type from events where run_id = '{run}' and type in ('RunResumed', 'RunFinalized') order by type"
    rows = laptop.yeto("sql", "--run", run, query, "--format", "csv")
    assert rows.returncode == 0 and rows.stdout.split()[-2:] == ["RunFinalized", "RunResumed"], rows.stdout + rows.stderr
    manifest = json.loads((laptop.home / "runs" / run / "artifact" / "manifest.json").read_text())
    assert manifest["resume"]["start_step"] == 24, manifest["resume"]


@pytest.mark.timeout(600)
def test_down_of_a_cloud_run_cancels_every_island_job_and_kills_its_processes(laptop):
    run = "cloud-r2"
    started = laptop.launch(run, "--max-steps", "100000", timeout=300)
    assert started.returncode == 0, f"{started.stdout}\n{started.stderr}\n{laptop.story()}"
    islands = wait_for(lambda: len(jobs := laptop.islands(run)) == 2 and all(j["status"] == "RUNNING" for j in jobs) and jobs,
                       180, "both islands' jobs running", interval=0.5, detail=laptop.story)
    wait_for(lambda: all(len(pids(j["ns"])) >= 3 for j in islands), 120, "each island's learner started (job shells, learner)",
             interval=0.5, detail=laptop.story)
    def trained(island: int) -> bool:       # `yeto logs` reads the island's lines from the head's log stream
        lines = laptop.yeto("logs", run, "--island", str(island))
        return lines.returncode == 0 and "yeto.learner: step " in lines.stdout      # the learner's text line
    # Both learners' progress on the tape first, asked from this process (a `yeto logs` process per poll would compete
    # with the learners' start for the machine), then their step lines in `yeto logs`.
    head = json.loads((laptop.home / "heads" / run / "head.json").read_text())
    progress = "select count(distinct learner) from events where type = 'LearnerProgress'"
    wait_for(lambda: (rehearsal_world.tape_rows(head, progress, waiting=True) or [["0"]])[0][0] == "2", 180,
             "both islands' progress on the tape", interval=0.5, detail=laptop.story)
    wait_for(lambda: trained(0) and trained(1), 180, "both islands' step lines in `yeto logs`", interval=1, detail=laptop.story)
    stopped = laptop.yeto("down", run)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    ids = {j["id"] for j in islands}
    wait_for(lambda: ids <= {i for call in rehearsal_world.record(laptop.world)["cancels"] for i in call}, 180,
             "every island's job cancelled by the head", interval=0.5, detail=laptop.story)
    api = rehearsal.RehearsalSky()
    assert {rehearsal_world.job_status(api, i) for i in ids} <= {"CANCELLED", "SUCCEEDED"}
    assert not [j["ns"] for j in islands if Path(f"/run/netns/{j['ns']}").exists() and pids(j["ns"])]
