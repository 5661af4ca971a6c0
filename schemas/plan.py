"""Events and commands of the plan area (filled in by its issue)."""
from __future__ import annotations

EXAMPLES: list = []
