"""``drivetrain.inference`` is :mod:`drivetrain.services.big_model.inference`,
the same module (its place before the layers)."""

import sys

from .services.big_model import inference as _module

sys.modules[__name__] = _module
