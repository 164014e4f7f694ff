"""``drivetrain.registration`` is :mod:`drivetrain.kernel.registration`,
the same module (its place before the layers)."""

import sys

from .kernel import registration as _module

sys.modules[__name__] = _module
