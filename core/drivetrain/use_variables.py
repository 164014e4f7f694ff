"""``drivetrain.use_variables`` is :mod:`drivetrain.selection.backend_variables`,
the same module (its place before the layers)."""

import sys

from .selection import backend_variables as _module

sys.modules[__name__] = _module
