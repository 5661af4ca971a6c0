"""The finalizer's public face: what the CLI may use (the hash every artifact manifest records per file)."""
from __future__ import annotations

from yeto.services.finalizer.artifact import sha256_file

__all__ = ["sha256_file"]
