"""Memory helpers (``accelerate.utils.memory``)."""

from __future__ import annotations

from ..services.memory import clear_device_cache, find_executable_batch_size, release_memory, should_reduce_batch_size
from ..kernel.contributed import surface_getattr

__all__ = ["clear_device_cache", "find_executable_batch_size", "release_memory", "should_reduce_batch_size"]


# names a plugin contributes to this module (keys "utils.memory.<name>"), served on first access
__getattr__ = surface_getattr(__name__)
