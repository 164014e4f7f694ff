"""``drivetrain.tracking`` is :mod:`drivetrain.services.tracking`,
the same module (its place before the layers)."""

import sys

from .services import tracking as _module

sys.modules[__name__] = _module
