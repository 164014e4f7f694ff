"""Memory helpers (``accelerate.utils.memory``)."""

from __future__ import annotations

from ..memory import find_executable_batch_size, release_memory, should_reduce_batch_size

__all__ = ["find_executable_batch_size", "release_memory", "should_reduce_batch_size"]
