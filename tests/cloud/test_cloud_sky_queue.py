"""How old a head's read of SkyPilot's job queue may get: $YETO_SKY_QUEUE_S, read when the backend is made (the
launcher's start), 15 s without it or when it is no positive number (docs/CONFIG.md); the cloud rehearsal sets its own
through its world's environment (tests/cloud/rehearsal_world.py)."""
from __future__ import annotations

import pytest

from yeto.services.launcher.backends.skypilot import QUEUE_ENV, QUEUE_MAX_AGE_S, SkyPilotBackend


class NoSky:
    """A SkyApi no test call reaches."""


@pytest.mark.parametrize(("raw", "want"), [(None, QUEUE_MAX_AGE_S), ("3", 3.0), ("0.5", 0.5), ("0", QUEUE_MAX_AGE_S),
                                           ("-2", QUEUE_MAX_AGE_S), ("nan", QUEUE_MAX_AGE_S), ("soon", QUEUE_MAX_AGE_S)])
def test_the_queue_reads_age_comes_from_the_environment_else_15_s(monkeypatch, raw, want):
    if raw is None:
        monkeypatch.delenv(QUEUE_ENV, raising=False)
    else:
        monkeypatch.setenv(QUEUE_ENV, raw)
    assert SkyPilotBackend(api=NoSky()).max_age_s == want
    assert SkyPilotBackend(api=NoSky(), max_age_s=0.2).max_age_s == 0.2      # given: the environment is not read

