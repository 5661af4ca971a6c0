"""Ascend NPUs on this machine, counted without importing torch or torch_npu (seconds at every start): the driver's
device files, narrowed by $ASCEND_RT_VISIBLE_DEVICES as the Ascend runtime narrows them (docs/ASCEND.md)."""
from __future__ import annotations

import os
import re

_DAVINCI = re.compile(r"davinci\d+")


def npu_devices(dev: str = "/dev") -> int:
    """Ascend NPUs the runtime would show here; 0 without the Ascend driver."""
    try:
        found = sum(1 for name in os.listdir(dev) if _DAVINCI.fullmatch(name))
    except OSError:
        return 0
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if visible is None:
        return found
    return min(found, len([d for d in visible.split(",") if d.strip()]))
