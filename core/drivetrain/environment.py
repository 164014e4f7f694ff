"""``drivetrain.environment`` is :mod:`drivetrain.kernel.environment`,
the same module (its place before the layers)."""

import sys

from .kernel import environment as _module

sys.modules[__name__] = _module
