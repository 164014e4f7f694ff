"""``drivetrain.version`` is :mod:`drivetrain.kernel.version`,
the same module (its place before the layers)."""

import sys

from .kernel import version as _module

sys.modules[__name__] = _module
