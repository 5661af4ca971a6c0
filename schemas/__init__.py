"""The contract between Yeto's processes: commands, events, subjects and streams, fragment wire format.

Nothing here does I/O and nothing here imports the rest of Yeto.
"""
from yeto.schemas.base import Command, Event, Message, SchemaError, derive_id, new_id, parse, registry, to_bytes

__all__ = ["Command", "Event", "Message", "SchemaError", "derive_id", "new_id", "parse", "registry", "to_bytes"]

# Importing the catalogue modules registers every message type.
from yeto.schemas import commands, data, events, final, fleet, layout, lineage, offers, plan, progress, training  # noqa: F401
