"""``drivetrain.utils.modeling`` is :mod:`drivetrain.services.big_model.modeling`,
the same module (its place before the layers)."""

import sys

from ..services.big_model import modeling as _module

sys.modules[__name__] = _module
