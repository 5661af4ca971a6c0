"""`yeto launch` with local CPU islands on a stack it will start: the stack's pre-imported learner (infra/stack/zygote.py)
started before the CLI's own imports, not after them.

The zygote's imports (torch, transformers, numba: ~3.3 CPU s) are the longest part of a first launch on a CPU; started
after `yeto.cli.launch.command`'s imports (the bus, the schemas, numba, nats: 0.7-0.9 s into a launch at load 1-3,
2.5 s at load 6) they finished that much later. `main` calls `zygote_first` before it builds the parser: the flags it
needs are read from argv as words (`--gpu X`, `--gpu=X`, ...), with no import beyond the stack's zygote module
(loaded without its package's __init__ since 2026-12-06: `stack_zygote`). It
starts a zygote only where `plan.zygote_early` would, read more narrowly (no --config file, every --gpu entry
`local:<n>xcpu`, no --dry-run, --nats-url or $YETO_NATS_URL, no NF4 base, no stack record under the state
directory); anything else is left to `zygote_early` after the checks, as before. Either reading wrong costs CPU only:
the launch's own `zygote_early` adopts a zygote started here, and one that no stack adopted by the time the command
ends (a refused check, a usage error, --help) is stopped then, as `drop_early_zygote` does for its own.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

VALUED = ("--gpu", "--config", "--nats-url", "--state-dir", "--base-quantization")
SWITCHES = ("--dry-run", "-h", "--help")
LOCAL_CPU = re.compile(r"local:[1-9][0-9]*x[cC][pP][uU]")


def words(argv: list[str]) -> dict[str, str | bool | None]:
    """The flags above as argv spells them in full (`--flag value`, `--flag=value`, a switch); an abbreviation or a
    config file's value is not read here (the parser's `zygote_early` reads those)."""
    found: dict[str, str | bool | None] = {}
    rest = iter(argv)
    for word in rest:
        name, eq, value = word.partition("=")
        if name in VALUED:
            found[name] = value if eq else next(rest, None)
        elif word in SWITCHES:
            found[word] = True
    return found


def eligible(argv: list[str]) -> Path | None:
    """The state directory whose stack this launch will start with local CPU islands, else None."""
    from yeto.infra import settings

    given = words(argv)
    gpu = given.get("--gpu")
    if (not isinstance(gpu, str) or any(given.get(f) for f in (*SWITCHES, "--config", "--nats-url"))
            or os.environ.get("YETO_NATS_URL") or given.get("--base-quantization") == "nf4"
            or not all(LOCAL_CPU.fullmatch(entry.strip()) for entry in gpu.split(","))):
        return None
    state = given.get("--state-dir")
    root = settings.load(state_dir=state if isinstance(state, str) else None).state_dir
    return None if (root / "stack.json").exists() else root      # a stack's record: its own zygote, or `yeto stack up`'s


def stack_zygote() -> ModuleType:
    """infra/stack/zygote.py, loaded without running its package's __init__ first: that imports the bus, the schemas
    (numba) and nats, ~0.5 CPU s that held the zygote's start back. Loaded under its own name, so the package adopts
    this module when the launch imports it (`from yeto.infra.stack import zygote` finds it in sys.modules)."""
    name = "yeto.infra.stack.zygote"
    if name in sys.modules:
        return sys.modules[name]
    import yeto.infra

    spec = importlib.util.spec_from_file_location(name, Path(yeto.infra.__path__[0]) / "stack" / "zygote.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@contextlib.contextmanager
def zygote_first(argv: list[str]) -> Iterator[None]:
    """Start the stack's zygote now where this launch will start a stack; when the command ends, stop it unless a stack
    adopted it."""
    root = eligible(argv)
    if root is not None and stack_zygote().start(root) is None:
        root = None
    try:
        yield
    finally:
        if root is not None:
            from yeto.cli.launch.plan import drop_early_zygote
            drop_early_zygote(argparse.Namespace(state_dir=str(root), nats_url=None))
