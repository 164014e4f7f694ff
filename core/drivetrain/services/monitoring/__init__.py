"""The step monitor of ``MonitorKwargs``: where each optimizer step's time goes, throughput,
model FLOPs and MFU, peak memory, and the loss-spike guard.

Off unless the handler is given: :func:`start` then returns ``None`` and nothing is wrapped,
imported or logged. With it, the objects ``prepare`` returns are watched (see :mod:`.monitor`):

- :mod:`.monitor`      the monitor: what it wraps, the step's timeline, windows, logging
- :mod:`.throughput`   samples and tokens of a batch, the model FLOPs counted on the first step
- :mod:`.spike_guard`  the running median, the spike check and the processes' agreement
- :mod:`.timed_collectives` the layer that times the collectives drivetrain issues
- :mod:`.report`       the metric names, a window's figures, the progress bar and the summary
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ...runtime.session import Session


def start(session: Session, handler: Any) -> Any:
    """The monitor of an ``Accelerator``'s ``session`` for a ``MonitorKwargs`` ``handler``; ``None`` without one."""
    if handler is None:
        return None
    from .monitor import StepMonitor

    return StepMonitor(session, handler)
