"""``drivetrain.utils.other`` is :mod:`drivetrain.services.other`,
the same module (its place before the layers)."""

import sys

from ..services import other as _module

sys.modules[__name__] = _module
