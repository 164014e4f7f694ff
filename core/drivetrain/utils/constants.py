"""``drivetrain.utils.constants`` is :mod:`drivetrain.selection.constants`,
the same module (its place before the layers)."""

import sys

from ..selection import constants as _module

sys.modules[__name__] = _module
