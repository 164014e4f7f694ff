"""``drivetrain.platform`` is :mod:`drivetrain.runtime.device_platform`,
the same module (its place before the layers)."""

import sys

from .runtime import device_platform as _module

sys.modules[__name__] = _module
