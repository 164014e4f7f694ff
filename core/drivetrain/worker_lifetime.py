"""``drivetrain.worker_lifetime`` is :mod:`drivetrain.runtime.worker_lifetime`,
the same module (its place before the layers)."""

import sys

from .runtime import worker_lifetime as _module

sys.modules[__name__] = _module
