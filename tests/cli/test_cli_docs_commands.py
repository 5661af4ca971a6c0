"""The commands the docs tell a new user to type, run as typed: the README's quick start, docs/CONFIG.md's and
docs/CLI.md's fenced bash blocks. Each line must exit 0, or the status its comment names (`# exit 2: ...`).

Shortened, by documented overrides only: the quick start's `--max-steps 60 --wait` trains 2 steps; in docs/CONFIG.md each
`--wait` becomes `--dry-run` (the same checks, the plan, no training). `<run>` is the id the launch before it printed,
`~/.yeto` and `/tmp/y` are this test's folders, and `make` lines (the developer loop: `make setup` made this venv,
`make demo` and `make test` are the long runs CI does) are not run here."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = (("README.md", "## Quick start"), ("docs/CONFIG.md", None), ("docs/CLI.md", None))
FENCE = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
COMMENT = re.compile(r"\s+#\s.*$")
EXIT = re.compile(r"#\s*exit (\d+)")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def doc_commands(path: str, section: str | None) -> list[tuple[str, int]]:
    """(command, expected exit status) for each line of the doc's bash blocks (in `section` only, when given)."""
    text = (REPO / path).read_text()
    if section:
        text = text.split(section, 1)[1].split("\n## ", 1)[0]
    out = []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            command = COMMENT.sub("", line).strip()
            if command and not command.startswith("make "):
                status = EXIT.search(line)
                out.append((" ".join(command.split()), int(status[1]) if status else 0))
    return out


def shortened(command: str, path: str) -> str:
    if path == "README.md" and "--wait" in command:
        return re.sub(r"--max-steps \d+", "--max-steps 2", command)
    if path == "docs/CONFIG.md":
        return command.replace("--wait", "--dry-run")
    return command


def run(line: str, **kwargs) -> subprocess.CompletedProcess:
    """The line in bash, in a session of its own: on a timeout the whole group goes, not only the shell."""
    proc = subprocess.Popen(["bash", "-c", line], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return subprocess.CompletedProcess(line, proc.returncode, out, err)


def test_the_docs_have_the_commands_this_test_runs():
    found = {path: doc_commands(path, section) for path, section in DOCS}
    assert any(c.startswith("yeto launch --gpu local:") and "--wait" in c for c, _ in found["README.md"])
    assert any("-c examples/configs/" in c for c, _ in found["docs/CONFIG.md"])
    assert [s for _, s in found["docs/CLI.md"]].count(2) == 2


def test_every_command_of_the_quick_start_config_and_cli_docs_runs_as_documented(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")        # the docs' relative paths; `merged/` lands here
    env = {**os.environ, "YETO_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("YETO_NATS_URL", None)
    run_id, failures, ran, estimates = None, [], 0, []
    try:
        for path, section in DOCS:
            for command, want in doc_commands(path, section):
                line = shortened(command, path).replace("~/.yeto", str(home)).replace("/tmp/y", str(tmp_path / "y"))
                if "<run>" in line:
                    assert run_id, f"{path}: {command!r} names <run> before any launch printed one"
                    line = line.replace("<run>", run_id)
                done = run(line, cwd=work, env=env)
                ran += 1
                if launched := re.search(r"^launched (r-[a-z0-9-]+):", done.stdout, re.M):
                    run_id = launched[1]
                if path == "README.md" and "--dry-run" in line:       # the quick start's estimate, as the README says
                    estimates.append(re.findall(r"^Estimate: ~(.*?) from launch", done.stdout, re.M))
                if done.returncode != want:
                    failures.append(f"{path}: `{line}` exited {done.returncode}, not {want}:\n{done.stdout[-1500:]}"
                                    f"{done.stderr[-1500:]}")
    finally:
        subprocess.run(["yeto", "stack", "down"], env=env, capture_output=True, timeout=120)
    assert not failures, "\n\n".join(failures)
    assert estimates == [["7 min 25 s"]] and "estimates 7 min 25 s" in (REPO / "README.md").read_text()
    assert ran >= 12 and (work / "merged" / "config.json").exists()       # the quick start's merge wrote the model
