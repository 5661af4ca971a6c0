"""The launcher's public face: what the CLI may use (the local backend for `yeto chaos kill`, a cloud run's head VM)."""
from __future__ import annotations

from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.backends.sky_api import sky_api
from yeto.services.launcher.head import HeadError, launch_head, take_down

__all__ = ["HeadError", "LocalBackend", "launch_head", "sky_api", "take_down"]
