"""Wiring of the planner service onto the shared runner (its real handlers arrive with its issue)."""
from __future__ import annotations

from yeto.infra.runner import ServiceSpec


def build(args) -> ServiceSpec:
    return ServiceSpec(name="planner")
