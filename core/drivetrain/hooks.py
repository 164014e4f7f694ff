"""``drivetrain.hooks`` is :mod:`drivetrain.services.big_model.module_hooks`,
the same module (its place before the layers)."""

import sys

from .services.big_model import module_hooks as _module

sys.modules[__name__] = _module
