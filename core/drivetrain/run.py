"""``drivetrain.run`` is :mod:`drivetrain.runtime.run`, the same module (its place before the layers)."""

import sys

from .runtime import run as _module

sys.modules[__name__] = _module
