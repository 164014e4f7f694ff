"""Accelerate's ``accelerate.parallelism_config`` import path.

``ParallelismConfig`` belongs to the strategy plugin that lays processes out on a device
mesh; it contributes the name as ``parallelism_config.ParallelismConfig``.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from ..kernel.contributed import resolve_module_name

    if name.startswith("__"):
        raise AttributeError(name)
    return resolve_module_name("parallelism_config", name, also_top_level=True)
