"""Freeing device memory, and retrying a function with a smaller batch when it runs out."""

from __future__ import annotations

import functools
import gc
import inspect
from typing import Any, Callable

import torch

from ..kernel.errors import ConfigError, NoExecutableBatchSizeError


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


def _shrink_by_a_tenth(batch_size: int) -> int:
    return int(batch_size * 0.9)


def _reducer(reduce_batch_size_fn: Callable[..., int] | None) -> Callable[[int], int]:
    """The next size after ``size``. Accelerate's ``reduce_batch_size_fn`` takes no argument (it
    keeps its own count); one that takes a parameter is given the size that failed."""
    if reduce_batch_size_fn is None:
        return _shrink_by_a_tenth
    try:
        takes_size = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                         for p in inspect.signature(reduce_batch_size_fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: call it as Accelerate does
        takes_size = False
    if takes_size:
        return reduce_batch_size_fn
    return lambda _size: reduce_batch_size_fn()


def find_executable_batch_size(function: Callable | None = None, starting_batch_size: int = 128,
                               reduce_batch_size_fn: Callable[..., int] | None = None) -> Callable:
    """Decorator: call ``function(batch_size, ...)``, retrying with a smaller ``batch_size`` after
    each out-of-memory error until a call succeeds.

    The size shrinks by a tenth each time (``int(size * 0.9)``: 128, 115, 103, ... 9, 8, 7, ...
    1), or as ``reduce_batch_size_fn`` says. The size that fits is kept for later calls. When it
    reaches zero (or starts there), :class:`~drivetrain.errors.NoExecutableBatchSizeError` (a
    ``RuntimeError``) is raised, chained to the last out-of-memory error. Any other exception
    propagates at once.

    The decorated function must take the batch size as its first argument; callers do not
    pass it.
    """
    if function is None:
        return functools.partial(find_executable_batch_size, starting_batch_size=starting_batch_size,
                                 reduce_batch_size_fn=reduce_batch_size_fn)
    reduce = _reducer(reduce_batch_size_fn)
    batch_size = starting_batch_size
    smallest_failed: int | None = None  # kept across calls, like the size itself

    @functools.wraps(function)
    def decorator(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size, smallest_failed
        gc.collect()
        _empty_device_cache()
        parameters = list(inspect.signature(function).parameters)
        if len(parameters) < len(args) + 1:
            names = ", ".join(f"{p}={a!r}" for p, a in zip(parameters[1:], args))
            raise TypeError(f"{function.__name__} gets its batch size from the decorator; call it without it "
                            f"(got {names})")
        last_error: BaseException | None = None
        while True:
            if batch_size <= 0:
                if smallest_failed is None:
                    raise NoExecutableBatchSizeError(
                        f"No executable batch size found, reached zero. starting_batch_size is {batch_size}: "
                        "start at 1 or more")
                raise NoExecutableBatchSizeError(
                    f"No executable batch size found, reached zero. Even a batch of {smallest_failed} ran out of "
                    "memory: make one sample need less (smaller model, mixed precision, offloading)") from last_error
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as error:
                if not should_reduce_batch_size(error):
                    raise
                last_error = error
            gc.collect()
            _empty_device_cache()
            smallest_failed = batch_size
            smaller = reduce(batch_size)
            if not isinstance(smaller, int) or smaller >= batch_size:
                raise ConfigError(f"reduce_batch_size_fn returned {smaller!r} after batch size {batch_size} ran "
                                  "out of memory; it must return a smaller int") from last_error
            batch_size = smaller

    return decorator
