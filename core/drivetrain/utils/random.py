"""``drivetrain.utils.random`` is :mod:`drivetrain.services.rng`,
the same module (its place before the layers)."""

import sys

from ..services import rng as _module

sys.modules[__name__] = _module
