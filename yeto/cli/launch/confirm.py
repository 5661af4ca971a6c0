"""The one question before money is spent: a cloud launch shows its plan and asks once on a terminal; elsewhere it
needs --yes. SkyPilot's API server, which the first cloud call starts, is started detached from this terminal."""
from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    """A message without terminal colour codes (SkyPilot colours its errors; Yeto's lines stay plain)."""
    return ANSI.sub("", text)


def rent_or_not(args, question: str, *, ask: Callable[[str], str] = input, interactive: bool | None = None) -> bool:
    """True under --yes; on a terminal the user's answer; elsewhere a ValueError naming --yes (nothing is rented)."""
    if args.confirm:
        return True
    interactive = sys.stdin.isatty() if interactive is None else interactive
    if not interactive:
        raise ValueError("this launch rents cloud machines and there is no terminal to ask on: pass --yes to launch "
                         "without asking (`yeto launch ... --dry-run` prints the plan first)")
    return ask(f"{question} [y/N] ").strip().lower() in ("y", "yes")


@contextlib.contextmanager
def detached_output() -> Iterator[None]:
    """Standard input, output and error on /dev/null for what starts inside (SkyPilot's API server outlives this
    command: holding the caller's stdout, `yeto launch ... | tee log` would never return); restored after."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        yield
    finally:
        for fd, old in zip((0, 1, 2), saved):
            os.dup2(old, fd)
            os.close(old)
        os.close(null)


def start_sky_server() -> None:
    """SkyPilot's local API server, started now with no stream of this terminal; nothing when a test double or a
    remote server stands in ($YETO_SKY_API, a configured endpoint) or SkyPilot is not installed."""
    if os.environ.get("YETO_SKY_API", "").strip():
        return
    try:
        import sky
        from sky.server import common
    except ImportError:
        return
    if not common.is_api_server_local():
        return
    try:
        with detached_output():
            sky.api_start()
    except Exception as e:  # noqa: BLE001 - SkyPilot's own message, without its colours, in Yeto's one line
        raise ConnectionError(f"SkyPilot's API server did not start: {strip_ansi(str(e))} (`yeto check` says why)") from None
