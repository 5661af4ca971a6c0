"""A learner face whose heavy names load on first use, so `yeto launch` can read a recipe without the training loop."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(face: str, table: dict[str, str]) -> Callable[[str], Any]:
    """The face's module `__getattr__` (PEP 562): `table` maps an exported name to "module:attribute", or to "module"
    when the name is that module itself."""
    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {face!r} has no attribute {name!r}")
        module, _, attribute = table[name].partition(":")
        loaded = importlib.import_module(module)
        return getattr(loaded, attribute) if attribute else loaded
    return __getattr__
