"""``drivetrain.utils.versions`` is :mod:`drivetrain.selection.versions`,
the same module (its place before the layers)."""

import sys

from ..selection import versions as _module

sys.modules[__name__] = _module
