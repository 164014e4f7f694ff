"""Accelerate's ``accelerate.parallelism_config`` import path.

``ParallelismConfig`` belongs to the strategy plugin that lays processes out on a device
mesh; it contributes the name as ``parallelism_config.ParallelismConfig``.
"""

from __future__ import annotations

from ..kernel.contributed import surface_getattr


__getattr__ = surface_getattr("drivetrain.parallelism_config", also=("",))
