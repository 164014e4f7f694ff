"""Accelerate's ``accelerate.utils.operations``: the nested-tensor helpers of one process
(:mod:`drivetrain.tensors.nested`) and the operations across processes
(:mod:`drivetrain.services.cross_process`), re-exported; nothing in the core imports this path."""

from __future__ import annotations

from ..kernel.contributed import surface_getattr
from ..services.cross_process import *  # noqa: F403
from ..services.cross_process import __all__ as _across
from ..tensors.nested import *  # noqa: F403
from ..tensors.nested import __all__ as _nested

__all__ = [*_across, *_nested]

# names a plugin contributes to this module (keys "utils.operations.<name>"), served on first access
__getattr__ = surface_getattr(__name__)
