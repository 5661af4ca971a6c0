"""Fixtures of the syncer's tests."""
from __future__ import annotations

import pytest

from yeto.schemas.codecs.base import set_threads, spread_on, threads


@pytest.fixture
def kernel_threads():
    """Set the kernel threads inside a test; the count before is put back after it, and spread on."""
    before = threads()
    yield set_threads
    set_threads(before)
    spread_on(True)
