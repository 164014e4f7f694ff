"""``drivetrain.enums`` is :mod:`drivetrain.selection.enums`,
the same module (its place before the layers)."""

import sys

from .selection import enums as _module

sys.modules[__name__] = _module
