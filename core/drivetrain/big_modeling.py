"""``drivetrain.big_modeling`` is :mod:`drivetrain.services.big_model.dispatch`,
the same module (its place before the layers)."""

import sys

from .services.big_model import dispatch as _module

sys.modules[__name__] = _module
