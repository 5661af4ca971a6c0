"""Globals as the watches deliver them, until the training thread takes them at a step boundary; thread-safe.

A delta or fetched keyframe chunk comes with its payload; a keyframe delivered headers only (the
`Nats-Msg-Size` header says the payload stayed in the stream) is an announcement, queued with None.
"""
from __future__ import annotations

import logging
import threading

from yeto.schemas.fragments import FragmentHeader

log = logging.getLogger(__name__)


class Inbox:
    def __init__(self) -> None:
        self._items: list[tuple[FragmentHeader, bytes | None]] = []
        self._arrived = threading.Condition()
        self.bytes_fetched = 0
        self._stopped = False     # training ended: what arrives now is dropped (nothing would take it)

    def add(self, headers: dict[str, str], data: bytes) -> FragmentHeader | None:
        """Queue one delivered chunk; returns its header if it is a keyframe announcement (headers only)."""
        try:
            header = FragmentHeader.from_nats(headers)
        except ValueError as e:
            log.warning("ignoring a global message: %s", e)
            return None
        announced = "Nats-Msg-Size" in headers
        self._put(header, None if announced else data)
        return header if announced else None

    def add_fetched(self, headers: dict[str, str], data: bytes) -> None:
        """A keyframe chunk fetched on demand."""
        self.bytes_fetched += len(data)
        self._put(FragmentHeader.from_nats(headers), data)

    def _put(self, header: FragmentHeader, data: bytes | None) -> None:
        with self._arrived:
            if self._stopped:
                return
            self._items.append((header, data))
            self._arrived.notify_all()

    def take(self) -> list[tuple[FragmentHeader, bytes | None]]:
        with self._arrived:
            out, self._items = self._items, []
        return out

    def stop(self) -> None:
        """Drop what is queued and whatever arrives later: a final evaluation of minutes must not pile up globals
        (a whole model's delta each) that no step boundary will take."""
        with self._arrived:
            self._stopped, self._items = True, []

    def wait(self, timeout_s: float) -> bool:
        """Block until something is queued or `timeout_s` passed; True if something is. The training loop
        never waits; this is for tests and tools."""
        with self._arrived:
            return self._arrived.wait_for(lambda: bool(self._items), timeout_s)
