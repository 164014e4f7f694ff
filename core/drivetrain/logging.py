"""``drivetrain.logging`` is :mod:`drivetrain.runtime.process_logging`,
the same module (its place before the layers)."""

import sys

from .runtime import process_logging as _module

sys.modules[__name__] = _module
