"""A layer over the run's collectives that adds the time of each call to the step monitor.

It times what drivetrain issues through the run's collectives object: ``gather``, ``reduce``,
``broadcast``, ``pad_across_processes``, ``gather_for_metrics``, the object collectives,
``wait_for_everyone``, ``check_trigger``, checkpointing's exchanges, the spike guard's
agreement. A strategy's own communication (DDP's gradient all-reduce inside ``backward``, an
engine's) does not pass through it and counts as forward+backward. The time is the call's
wall time on the host: with a device's asynchronous collectives, the time to queue it.
"""

from __future__ import annotations

import time
from typing import Any, Callable

_TIMED = ("all_gather", "all_gather_into", "all_reduce", "broadcast", "barrier", "all_gather_object",
          "broadcast_object_list")
# the preemption check's own channel (no order with the run's collectives) and leaving the group
_UNTIMED_OPTIONAL = ("start_flag_max", "destroy")


class TimedCollectives:
    """``inner``'s operations, each call's seconds handed to ``record``. Its other members
    (``world_size``, ``rank`` and, where ``inner`` has them, the untimed ``start_flag_max`` and
    ``destroy``) are ``inner``'s own, copied here by name."""

    def __init__(self, inner: Any, record: Callable[[float], None]) -> None:
        self.inner = inner
        self.world_size, self.rank = inner.world_size, inner.rank
        for name in _TIMED:
            setattr(self, name, _timed(getattr(inner, name), record))
        for name in _UNTIMED_OPTIONAL:
            if hasattr(inner, name):  # optional in the protocol: looked up with getattr/hasattr
                setattr(self, name, getattr(inner, name))


def _timed(operation: Callable[..., Any], record: Callable[[float], None]) -> Callable[..., Any]:
    clock = time.perf_counter

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return operation(*args, **kwargs)
        finally:
            record(clock() - start)

    return timed


def install(run: Any, record: Callable[[float], None]) -> TimedCollectives | None:
    """Time the run's collectives from now on (``None`` for one process: nothing to time)."""
    if run.collectives.world_size <= 1:
        return None
    layer: list[TimedCollectives] = []

    def wrap(collectives: Any) -> Any:
        layer.append(TimedCollectives(collectives, record))
        return layer[0]

    run.wrap_collectives(wrap)
    return layer[0]


def uninstall(run: Any, layer: TimedCollectives | None) -> None:
    """Take ``layer`` off the run's collectives again, if it is still the one in place."""
    if layer is not None:
        run.wrap_collectives(lambda collectives: collectives.inner if collectives is layer else collectives)
