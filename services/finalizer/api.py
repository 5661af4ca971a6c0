"""The finalizer's public face: what the CLI may use (the hash every artifact manifest records per file, and the
code version a manifest's provenance records, which `yeto merge` records for the merge too)."""
from __future__ import annotations

from yeto.services.finalizer.artifact import sha256_file
from yeto.services.finalizer.provenance import code_version

__all__ = ["code_version", "sha256_file"]
