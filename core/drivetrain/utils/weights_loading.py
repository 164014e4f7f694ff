"""``drivetrain.utils.weights_loading`` is :mod:`drivetrain.services.big_model.weights_loading`,
the same module (its place before the layers)."""

import sys

from ..services.big_model import weights_loading as _module

sys.modules[__name__] = _module
