"""``drivetrain.detection`` is :mod:`drivetrain.selection.detection`,
the same module (its place before the layers)."""

import sys

from .selection import detection as _module

sys.modules[__name__] = _module
