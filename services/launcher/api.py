"""The launcher's public face: what the CLI may use (the local backend for `yeto chaos kill`, a cloud run's head VM).

External slots' join tokens are here too: `yeto launch` prints them, `yeto join` decodes one.
"""
from __future__ import annotations

from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.backends.sky_api import sky_api
from yeto.services.launcher.head import HeadError, launch_head, take_down
from yeto.services.launcher.join_token import EXTERNAL, JoinToken, external_entry, read_token

__all__ = ["EXTERNAL", "HeadError", "JoinToken", "LocalBackend", "external_entry", "launch_head",
           "read_token", "sky_api", "take_down"]
