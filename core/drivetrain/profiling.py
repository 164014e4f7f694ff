"""``drivetrain.profiling`` is :mod:`drivetrain.runtime.profiling`,
the same module (its place before the layers)."""

import sys

from .runtime import profiling as _module

sys.modules[__name__] = _module
