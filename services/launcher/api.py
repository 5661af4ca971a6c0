"""The launcher's public face: what the CLI may use (the local backend for `yeto chaos kill`, a cloud run's head VM).

External slots' join tokens are here too: `yeto launch` prints them, `yeto join` decodes one. `decide_launch` is the
launcher's decision on a LaunchRun (RunLaunched first): the WAN benchmark, which starts its own islands, replays it.
"""
from __future__ import annotations

from yeto.services.launcher.backends.base import IslandLaunch
from yeto.services.launcher.backends.local import LocalBackend
from yeto.services.launcher.backends.sky_api import sky_api
from yeto.services.launcher.backends.sky_tasks import head_task, island_task  # `yeto launch --dry-run` shows them
from yeto.services.launcher.head import HeadError, launch_head, take_down
from yeto.services.launcher.join_token import EXTERNAL, JoinToken, external_entry, read_token
from yeto.services.launcher.logic import launch as decide_launch

__all__ = ["EXTERNAL", "HeadError", "IslandLaunch", "JoinToken", "LocalBackend", "decide_launch", "external_entry", "launch_head",
           "head_task", "island_task", "read_token", "sky_api", "take_down"]
