"""The run's objects a strategy or precision plugin works with (imports torch).

The ``run`` argument of every run hook is the rest: ``run.platform``, ``run.options``,
``run.collectives`` (the run's all_gather, all_reduce, broadcast, barrier), ``run.state``.
"""

from ..runtime.optimizer import AcceleratedOptimizer
from ..runtime.scheduler import AcceleratedScheduler
from ..runtime.state import GradientState, PartialState
from ..tensors.nested import convert_to_fp32, recursively_apply

__all__ = [
    "AcceleratedOptimizer", "AcceleratedScheduler", "GradientState", "PartialState", "convert_to_fp32",
    "recursively_apply",
]
