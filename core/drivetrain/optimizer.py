"""``drivetrain.optimizer`` is :mod:`drivetrain.runtime.optimizer`,
the same module (its place before the layers)."""

import sys

from .runtime import optimizer as _module

sys.modules[__name__] = _module
