"""DilocoSync's array adapter (learners/diloco_sync.py ArrayAdapter: names, shape, dtype, read, write) over a dict of
NumPy arrays, for tests that drive the step boundary without a model."""
from __future__ import annotations

import numpy as np


class Arrays(dict):
    def names(self): return sorted(self)
    def shape(self, name): return self[name].shape
    def dtype(self, name): return "float32"
    def read(self, name): return self[name]
    def write(self, name, value): self[name] = np.asarray(value, dtype=np.float32)
