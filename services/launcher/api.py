"""The launcher's public face: what the CLI may use (the local backend, for `yeto chaos kill`)."""
from __future__ import annotations

from yeto.services.launcher.backends.local import LocalBackend

__all__ = ["LocalBackend"]
