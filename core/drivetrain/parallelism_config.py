"""``drivetrain.parallelism_config`` is :mod:`drivetrain.runtime.parallelism_config`,
the same module (its place before the layers)."""

import sys

from .runtime import parallelism_config as _module

sys.modules[__name__] = _module
