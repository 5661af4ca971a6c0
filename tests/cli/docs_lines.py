"""Runs the fenced bash lines the docs tell a new user to type, as typed, each in bash, and checks each exit status.

Used by test_cli_docs_commands.py (the README's quick start) and test_cli_docs_config_and_cli.py (docs/CONFIG.md,
docs/CLI.md). Each line must exit 0, or the status its comment names (`# exit 2: ...`). Shortened, by documented
overrides only: the quick start's `--max-steps 60 --wait` trains 2 steps; in docs/CONFIG.md each `--wait` becomes
`--dry-run` (the same checks, the plan, no training). `<run>` is the id the launch before it printed, `~/.yeto` and
`/tmp/y` are the test's folders, and `make` lines (the developer loop: `make setup` made this venv, `make demo` and
`make test` are the long runs CI does) are not run here."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
COMMENT = re.compile(r"\s+#\s.*$")
EXIT = re.compile(r"#\s*exit (\d+)")


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


@dataclass
class Ran:
    """What running the docs' lines gave: the folder they ran in, how many ran, the lines that did not exit as
    documented (with their output), and the estimates the README's dry runs printed."""
    work: Path
    num_ran: int = 0
    failures: list[str] = field(default_factory=list)
    estimates: list[list[str]] = field(default_factory=list)


def run_docs(docs: tuple[tuple[str, str | None], ...], tmp_path: Path) -> Ran:
    """Every line of `docs` ((path, section) pairs) in order, in a fresh YETO_HOME; the stack goes down after."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")        # the docs' relative paths; `merged/` lands here
    env = {**os.environ, "YETO_HOME": str(home), "HF_HUB_OFFLINE": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("YETO_NATS_URL", None)
    run_id, ran = None, Ran(work)
    try:
        for path, section in docs:
            for command, want in doc_commands(path, section):
                line = shortened(command, path).replace("~/.yeto", str(home)).replace("/tmp/y", str(tmp_path / "y"))
                if "<run>" in line:
                    assert run_id, f"{path}: {command!r} names <run> before any launch printed one"
                    line = line.replace("<run>", run_id)
                done = run(line, cwd=work, env=env)
                ran.num_ran += 1
                if launched := re.search(r"^launched (r-[a-z0-9-]+):", done.stdout, re.M):
                    run_id = launched[1]
                if path == "README.md" and "--dry-run" in line:       # the quick start's estimate, as the README says
                    ran.estimates.append(re.findall(r"^Estimate: ~(.*?) from launch", done.stdout, re.M))
                if done.returncode != want:
                    ran.failures.append(f"{path}: `{line}` exited {done.returncode}, not {want}:\n"
                                        f"{done.stdout[-1500:]}{done.stderr[-1500:]}")
    finally:
        subprocess.run(["yeto", "stack", "down"], env=env, capture_output=True, timeout=120)
    return ran
