"""Process settings, read once from the environment (`YETO_` prefix); command-line flags win."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


@dataclass(frozen=True, kw_only=True)
class Settings:
    state_dir: Path
    """Where the local stack keeps nats-server's store, the tape, logs and run folders ($YETO_HOME, ~/.yeto)."""
    nats_url: str | None
    """A running stack's NATS URL ($YETO_NATS_URL); None means: the local stack under state_dir. Never with
    credentials in it: those come from the file $YETO_NATS_CREDS names (infra/bus/auth.py)."""


def load(*, state_dir: str | Path | None = None, nats_url: str | None = None) -> Settings:
    home = state_dir or os.environ.get("YETO_HOME") or Path.home() / ".yeto"
    url = nats_url or os.environ.get("YETO_NATS_URL")
    if url and "@" in urlsplit(url).netloc:
        # a URL travels on command lines (`ps`), in logs and on the tape: a password inside it leaks
        raise ValueError("the NATS URL carries credentials (user:password@); give the URL without them and put the "
                         "credential file's path in $YETO_NATS_CREDS")
    return Settings(state_dir=Path(home).expanduser().resolve(), nats_url=url)


def seconds_from_env(name: str, default: float, log: logging.Logger) -> float:
    """A positive number of seconds from $`name` (`default` where it is unset); a value that is not one (a word, zero,
    a negative, nan) is warned about on `log` (the reader's) and the default used."""
    raw = os.environ.get(name)
    try:
        value = default if raw is None else float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:                     # nan too
        log.warning("%s=%r is not a positive number of seconds; using %g", name, raw, default)
        return default
    return value
