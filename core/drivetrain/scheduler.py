"""``drivetrain.scheduler`` is :mod:`drivetrain.runtime.scheduler`,
the same module (its place before the layers)."""

import sys

from .runtime import scheduler as _module

sys.modules[__name__] = _module
