"""``drivetrain.state`` is :mod:`drivetrain.runtime.state`, the same module (its place before the layers)."""

import sys

from .runtime import state as _module

sys.modules[__name__] = _module
