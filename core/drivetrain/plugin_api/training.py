"""The run's objects a strategy or precision plugin works with (imports torch).

The ``run`` argument of every run hook is the rest (``plugin_api.Run``): ``run.platform``,
``run.strategy``, ``run.precision``, ``run.collectives`` (the run's all_gather, all_reduce,
broadcast, barrier), ``run.state``.
What the accelerator a hook is given has prepared: ``prepared_objects(accelerator)``.
A communication plugin notes the collectives of its library with ``watch_module_functions``
(or one with ``watched``), so a hung job's report names them (``docs/monitoring.md, "Reading a hang report"``).
"""

from typing import Any

from ..runtime.collective_watch import watch_module_functions, watched
from ..runtime.optimizer import AcceleratedOptimizer
from ..runtime.prepared import PreparedObjects
from ..runtime.scheduler import AcceleratedScheduler
from ..runtime.state import GradientState, PartialState
from ..tensors.nested import convert_to_fp32, recursively_apply

__all__ = [
    "AcceleratedOptimizer", "AcceleratedScheduler", "GradientState", "PartialState", "PreparedObjects",
    "convert_to_fp32", "prepared_objects", "recursively_apply", "watch_module_functions", "watched",
]


def prepared_objects(accelerator: Any) -> PreparedObjects:
    """What ``accelerator`` (the one a hook is given) prepared: its session's record."""
    return accelerator.session.prepared
