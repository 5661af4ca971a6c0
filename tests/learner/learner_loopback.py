"""The in-process wire between torch learners and the real SyncerCore, by its old name: benchmarks/lib_loopback.py.

The learner overhead benchmark times the learner over it; the learner tests import it by this name.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2] / "benchmarks"))   # appended: benchmarks/ shadows nothing
from lib_loopback import Loopback

__all__ = ["Loopback"]
