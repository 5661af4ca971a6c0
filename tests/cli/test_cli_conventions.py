"""CLI conventions: a light parser (no heavy library imported to build it or print --help), --version, global flags
before or after the command, and the top-level command table equal to what the command modules register."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys

import pytest

from yeto.cli.main import COMMAND_MODULES, COMMANDS, build_parser, command_of, main

HEAVY = ("ortools", "torch", "duckdb", "pyarrow", "transformers", "sky")


def imported_after(code: str) -> set[str]:
    """Top-level package names in sys.modules after running `code` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_building_the_whole_parser_imports_no_heavy_library():
    loaded = imported_after("import yeto.cli.main as m; m.build_parser()")
    assert "yeto" in loaded and not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_top_level_help_imports_no_command_module():
    code = "import contextlib, io\nfrom yeto.cli.main import main\n" \
           "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()): main(['--help'])"
    probe = code + "\nimport sys; print(sorted(m for m in sys.modules if m.startswith(('yeto.cli.', 'pydantic'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['yeto.cli.main', 'yeto.cli.version']"


@pytest.mark.parametrize("name", COMMAND_MODULES)
def test_each_command_module_imports_first_in_a_fresh_interpreter(name):
    """`yeto CMD` imports only CMD's module: it must not lean on another command having been imported before it
    (a room's __init__ importing a sibling command made `yeto shape` fail with a circular import)."""
    done = subprocess.run([sys.executable, "-c", f"import yeto.cli.{name} as m; assert callable(m.register)"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_command_table_is_what_the_modules_register():
    registered: dict[str, tuple[str, str]] = {}
    for name in COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"yeto.cli.{name}").register(sub)
        registered |= {a.dest: (name, a.help) for a in sub._choices_actions}
    assert registered == COMMANDS


@pytest.mark.parametrize("argv", [
    ["--state-dir", "/s", "--nats-url", "nats://h:1", "status"],
    ["status", "--state-dir", "/s", "--nats-url", "nats://h:1"],
    ["--state-dir", "/s", "stack", "status", "--nats-url", "nats://h:1"],
    ["tape", "show", "--nats-url", "nats://h:1", "--state-dir=/s"],
])
def test_global_flags_are_accepted_before_or_after_the_command(argv):
    args = build_parser().parse_args(argv)
    assert (args.state_dir, args.nats_url) == ("/s", "nats://h:1")


def test_a_global_flag_before_the_command_is_kept_when_absent_after_it():
    args = build_parser().parse_args(["--state-dir", "/s", "data", "check", "--data", "x.jsonl"])
    assert args.state_dir == "/s" and args.nats_url is None


def test_command_of_skips_the_global_flags_and_their_values():
    assert command_of(["--state-dir", "status", "logs", "r-1"]) == "logs"
    assert command_of(["--state-dir=/s", "-h"]) is None
    assert command_of(["--version"]) is None


def test_version_prints_the_package_version_and_exits_0(capsys):
    from yeto import __version__
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"yeto {__version__}") and "(git " in line   # the tests run in a checkout


def test_an_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["statsu"])
    assert e.value.code == 2 and "invalid choice: 'statsu'" in capsys.readouterr().err


def test_stack_status_json_says_which_processes_are_up(tmp_path, capsys):
    assert main(["stack", "status", "--state-dir", str(tmp_path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"state_dir": str(tmp_path), "url": None, "processes": []}
    assert main(["stack", "up", "--state-dir", str(tmp_path)]) == 0
    try:
        capsys.readouterr()
        assert main(["stack", "status", "--json", "--state-dir", str(tmp_path)]) == 0
        st = json.loads(capsys.readouterr().out)
        assert st["url"].startswith("nats://") and {"nats-server", "tape"} <= {p["name"] for p in st["processes"]}
        assert all(p["up"] and p["pid"] > 0 for p in st["processes"])
    finally:
        main(["stack", "down", "--state-dir", str(tmp_path)])


def test_the_shell_completes_commands_and_a_command_s_flags(tmp_path):
    """What `eval "$(register-python-argcomplete yeto)"` asks: the real entry point with argcomplete's variables."""
    def complete(line: str) -> list[str]:
        out = tmp_path / "completions"
        env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line, "COMP_POINT": str(len(line)),
               "ARGCOMPLETE_USE_TEMPFILES": "1", "_ARGCOMPLETE_STDOUT_FILENAME": str(out)}
        subprocess.run([sys.executable, "-c", "from yeto.cli.main import main; main()"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return sorted(w.strip() for w in out.read_text().split("\n") if w.strip())
    assert complete("yeto sta") == ["stack", "status"]
    assert complete("yeto status --j") == ["--json"]
    assert {"--type", "--json", "--state-dir"} <= set(complete("yeto tape show --"))
