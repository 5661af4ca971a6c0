"""Events and commands of the fleet area (filled in by its issue)."""
from __future__ import annotations

EXAMPLES: list = []
