"""``drivetrain.kwargs_handlers`` is :mod:`drivetrain.runtime.kwargs_handlers`,
the same module (its place before the layers)."""

import sys

from .runtime import kwargs_handlers as _module

sys.modules[__name__] = _module
