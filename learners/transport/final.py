"""The run's final versions, as the finalizer marked them (CheckpointMarkedFinal), for the learner to acknowledge."""
from __future__ import annotations

import threading
from typing import Protocol

from yeto.schemas.base import parse
from yeto.schemas.final import CheckpointMarkedFinal


class Delivered(Protocol):
    data: bytes


class FinalWatch:
    """Fed by a watch on the run's CheckpointMarkedFinal; read by the training thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[int, int] | None = None

    async def on_marked(self, delivery: Delivered) -> None:
        marked = parse(delivery.data)
        if not isinstance(marked, CheckpointMarkedFinal):
            return
        with self._lock:
            self._versions = dict(marked.versions)

    def versions(self) -> dict[int, int] | None:
        with self._lock:
            return self._versions
