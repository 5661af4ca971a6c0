"""Events and commands of the training area (filled in by its issue)."""
from __future__ import annotations

EXAMPLES: list = []
