"""SkyPilot's real API server, started by `yeto launch` (yeto/cli/launch/confirm.py start_sky_server), does not hold the
caller's stdout: `yeto launch ... | cat` returns. SkyPilot's own start (sky.api_start() as its first call does it)
keeps the pipe open until the server stops (measured by hand: 8 s against never, 2026-12-05; docs/LAUNCH.md)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
START = "from yeto.cli.launch.confirm import start_sky_server; start_sky_server(); print('started')"


def test_the_api_server_yeto_starts_leaves_the_caller_s_pipe(tmp_path):
    pytest.importorskip("sky")
    env = {**os.environ, "HOME": str(tmp_path)}        # SkyPilot's state (~/.sky) in this test's folder
    env.pop("YETO_SKY_API", None)
    healthy = ("from sky.server import common\ntry:\n    common.check_server_healthy(); print('up')\n"
               "except Exception:\n    print('down')")
    if subprocess.run([sys.executable, "-c", healthy], env=env, capture_output=True, text=True).stdout.strip() == "up":
        pytest.skip("a SkyPilot API server answers on this machine already: this test starts and stops its own")
    caller = subprocess.Popen([sys.executable, "-c", START], env=env, stdout=subprocess.PIPE, text=True)
    try:
        out, _ = caller.communicate(timeout=240)     # EOF: no process but the caller held the pipe's write end
        assert out == "started\n" and caller.returncode == 0
        assert subprocess.run([sys.executable, "-c", healthy], env=env, capture_output=True,
                              text=True).stdout.strip() == "up"          # the server outlives the command, as it should
    finally:
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "sky"), "api", "stop"], env=env,
                       capture_output=True, timeout=120)
