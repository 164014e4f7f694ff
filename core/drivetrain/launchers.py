"""``drivetrain.launchers`` is :mod:`drivetrain.services.launchers`,
the same module (its place before the layers)."""

import sys

from .services import launchers as _module

sys.modules[__name__] = _module
