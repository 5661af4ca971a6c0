"""SkyApi test doubles for `yeto check` ($YETO_SKY_API=check_sky:<class>): only `check`, SkyPilot's `sky check`.
The real one (RealSky, SkyPilot's own check in a HOME without credentials) is run by test_cli_check.py too."""
from __future__ import annotations

import threading


class AwsOnly:
    """AWS's credentials work; GCP's do not, with SkyPilot's kind of hint."""

    def check(self) -> dict[str, str | None]:
        return {"aws": None, "gcp": "GCP credentials not found. Run: gcloud init", "lambda": "no api key"}


class NoCloud:
    def check(self) -> dict[str, str | None]:
        return {"aws": "AWS credentials are not set.", "gcp": "GCP tools are not installed."}


class Hangs:
    """A check that never answers (a cloud API that waits on a network this machine does not have) until released."""

    release = threading.Event()

    def check(self) -> dict[str, str | None]:
        self.release.wait()
        return {}


class AwsWithoutServer(AwsOnly):
    """AWS works, but SkyPilot's API server (every launch goes through it) cannot start."""

    def api_server_problem(self) -> str | None:
        return "SkyPilot's API server cannot start here: TypeError: boom"
