"""``drivetrain.utils.device_map`` is :mod:`drivetrain.services.big_model.device_map`,
the same module (its place before the layers)."""

import sys

from ..services.big_model import device_map as _module

sys.modules[__name__] = _module
