"""Process settings, read once from the environment (`YETO_` prefix); command-line flags win."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class Settings:
    state_dir: Path
    """Where the local stack keeps nats-server's store, the tape, logs and run folders ($YETO_HOME, ~/.yeto)."""
    nats_url: str | None
    """A running stack's NATS URL ($YETO_NATS_URL); None means: the local stack under state_dir."""


def load(*, state_dir: str | Path | None = None, nats_url: str | None = None) -> Settings:
    home = state_dir or os.environ.get("YETO_HOME") or Path.home() / ".yeto"
    return Settings(state_dir=Path(home).expanduser().resolve(), nats_url=nats_url or os.environ.get("YETO_NATS_URL"))
