"""``drivetrain.utils.imports`` is :mod:`drivetrain.services.availability`,
the same module (its place before the layers)."""

import sys

from ..services import availability as _module

sys.modules[__name__] = _module
