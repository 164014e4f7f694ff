"""``drivetrain.memory`` is :mod:`drivetrain.services.memory`,
the same module (its place before the layers)."""

import sys

from .services import memory as _module

sys.modules[__name__] = _module
