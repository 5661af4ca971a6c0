"""`yeto launch` checks a local model's data without importing torch or transformers (their import was most of the
CLI's start-up seconds, benchmarks/startup.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from yeto.learners.torch.tiny import write_chat_jsonl, write_model_dir

YETO = str(Path(sys.executable).parent / "yeto")


def test_a_local_launch_checks_its_data_without_torch_or_transformers(tmp_path):
    model, data, home = write_model_dir(tmp_path / "model"), write_chat_jsonl(tmp_path / "chat.jsonl"), tmp_path / "home"
    env = {**os.environ, "YETO_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-X", "importtime", YETO, "launch", "--gpu", "local:1xcpu,local:1xcpu", "--model", str(model),
            "--data", str(data), "--tuning", "full", "--max-steps", "4", "--seq-len", "64", "--dry-run"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dry run: nothing was started" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "yeto.learners.data.tokenizer_files" in imported and "tokenizers" in imported     # the check ran
    assert not imported & {"torch", "transformers"}


FIRST = r"""
import json, sys
from yeto.infra.stack import zygote
calls = []
zygote.start = lambda root: calls.append("yeto.cli.launch.command" in sys.modules) or None    # starts nothing here
from yeto.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "command_imported_at_each_start": calls}))
"""


def test_a_launch_on_a_stack_it_will_start_starts_the_zygote_before_its_own_imports(tmp_path):
    """cli/launch/early.py: the stack's zygote is started before `yeto.cli.launch.command` is imported (then once more,
    idempotently, by the launch's own check once its flags are parsed)."""
    seen = refused_launch(FIRST, tmp_path)
    assert seen["command_imported_at_each_start"][0] is False, seen


def refused_launch(script: str, tmp_path: Path) -> dict:
    """`yeto launch` on two local CPU islands through `script` (main with something recorded), refused by its data
    check (no stack is started); the JSON line `script` prints last."""
    model, home = write_model_dir(tmp_path / "model"), tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "YETO_NATS_URL"} | {"YETO_HOME": str(home)}
    argv = [sys.executable, "-c", script, "launch", "--gpu", "local:1xcpu,local:1xcpu", "--model", str(model),
            "--data", str(tmp_path / "missing.jsonl"), "--max-steps", "2"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["code"] == 2, done.stderr[-2000:]           # the data check refuses: no stack
    return seen


BEFORE_BUS = r"""
import json, subprocess, sys
REAL, seen = subprocess.Popen, []
class Seen(REAL):           # records what was imported when the zygote starts; runs `python -c pass` in its place
    def __init__(self, args, *a, **k):
        if "yeto.learners.torch.zygote" in args:
            seen.append(sorted(m for m in ("yeto.infra.stack", "yeto.infra.bus", "yeto.schemas", "numba") if m in sys.modules))
            args = [sys.executable, "-c", "pass"]
        super().__init__(args, *a, **k)
subprocess.Popen = Seen
from yeto.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "imported_at_each_start": seen}))
"""


def test_the_early_zygote_starts_before_the_stack_package_imports_the_bus(tmp_path):
    """early.stack_zygote loads infra/stack/zygote.py without its package's __init__ (the bus, the schemas, numba,
    nats: ~0.5 CPU s that came before the zygote's start); the package adopts that module later."""
    from yeto.infra.bus import auth as bus_auth
    from yeto.infra.stack import zygote as stack_zygote

    assert stack_zygote.CREDS_ENV == bus_auth.CREDS_ENV
    seen = refused_launch(BEFORE_BUS, tmp_path)
    assert seen["imported_at_each_start"][0] == [], seen     # the early start: none of them yet
    assert "yeto.infra.stack" in seen["imported_at_each_start"][-1]    # the launch's own check: the package, adopting it


@pytest.mark.parametrize("argv, env, starts", [
    (["launch", "--gpu", "local:1xcpu,local:2xcpu", "--model", "m"], {}, True),
    (["--state-dir", "{home}", "launch", "--gpu=local:1xCPU"], {}, True),
    (["launch", "--gpu", "local:1xcpu", "--dry-run"], {}, False),
    (["launch", "--gpu", "local:1xcuda"], {}, False),
    (["launch", "--gpu", "local:1xcpu,aws:1xa100"], {}, False),
    (["launch", "--model", "m"], {}, False),
    (["launch", "--gpu", "local:1xcpu", "--config", "run.yaml"], {}, False),
    (["launch", "--gpu", "local:1xcpu", "--nats-url", "nats://127.0.0.1:4222"], {}, False),
    (["launch", "--gpu", "local:1xcpu"], {"YETO_NATS_URL": "nats://127.0.0.1:4222"}, False),
    (["launch", "--gpu", "local:1xcpu", "--base-quantization", "nf4"], {}, False),
    (["launch", "--gpu", "local:1xcpu", "--help"], {}, False),
])
def test_the_early_start_reads_only_what_it_is_sure_of(argv, env, starts, tmp_path, monkeypatch):
    """Anything it does not read as a local CPU launch on a stack to start is left to the launch's own check."""
    from yeto.cli.launch import early

    home = tmp_path / "home"
    monkeypatch.setenv("YETO_HOME", str(home))
    monkeypatch.delenv("YETO_NATS_URL", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    argv = [w.replace("{home}", str(home)) for w in argv]
    assert (early.eligible(argv) == home.resolve()) is starts
    if starts:                          # a stack's record under the state directory: its own zygote, not this one's
        home.mkdir()
        (home / "stack.json").write_text("{}")
        assert early.eligible(argv) is None
