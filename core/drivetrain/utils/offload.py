"""``drivetrain.utils.offload`` is :mod:`drivetrain.services.big_model.offload`,
the same module (its place before the layers)."""

import sys

from ..services.big_model import offload as _module

sys.modules[__name__] = _module
