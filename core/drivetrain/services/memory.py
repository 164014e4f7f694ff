"""Freeing device memory, and retrying a function with a smaller batch when it runs out."""

from __future__ import annotations

import functools
import gc
import inspect
from typing import Any, Callable

import torch

from ..kernel.errors import DrivetrainError


def _empty_device_cache() -> None:
    from ..runtime.state import PartialState, is_initialized

    if is_initialized():
        PartialState().platform.empty_cache()


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Empty the device cache of this process's platform, collecting garbage first if asked.

    Works before any state exists: the platform is then the one detection would choose.
    """
    from .big_model.modeling import current_platform

    if garbage_collection:
        gc.collect()
    current_platform().empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """Drop references to ``objects``, collect garbage and empty the device cache.

    Use as ``a, b = release_memory(a, b)``.
    """
    released: list[None] = [None] * len(objects)
    gc.collect()
    _empty_device_cache()
    return released


def should_reduce_batch_size(exception: BaseException) -> bool:
    """Whether ``exception`` says the device (or the CPU) ran out of memory."""
    if isinstance(exception, (torch.OutOfMemoryError, MemoryError)):
        return True
    if isinstance(exception, RuntimeError) and len(exception.args) == 1:
        message = str(exception.args[0])
        return any(text in message for text in ("out of memory", "DefaultCPUAllocator: can't allocate memory"))
    return False


def find_executable_batch_size(function: Callable | None = None, starting_batch_size: int = 128,
                               reduce_batch_size_fn: Callable[[int], int] | None = None) -> Callable:
    """Decorator: call ``function(batch_size, ...)``, halving ``batch_size`` after each
    out-of-memory error, until it succeeds (or reaches zero).

    The decorated function must take the batch size as its first argument; callers do not
    pass it.
    """
    if function is None:
        return functools.partial(find_executable_batch_size, starting_batch_size=starting_batch_size,
                                 reduce_batch_size_fn=reduce_batch_size_fn)
    reduce = reduce_batch_size_fn or (lambda size: size // 2)
    batch_size = starting_batch_size

    @functools.wraps(function)
    def decorator(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        gc.collect()
        _empty_device_cache()
        parameters = list(inspect.signature(function).parameters)
        if len(parameters) < len(args) + 1:
            names = ", ".join(f"{p}={a!r}" for p, a in zip(parameters[1:], args))
            raise TypeError(f"{function.__name__} gets its batch size from the decorator; call it without it "
                            f"(got {names})")
        while True:
            if batch_size <= 0:
                raise DrivetrainError("no executable batch size found: even a batch of 1 ran out of memory")
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:
                if not should_reduce_batch_size(error):
                    raise
                gc.collect()
                _empty_device_cache()
                batch_size = reduce(batch_size)

    return decorator
