"""``drivetrain.errors`` is :mod:`drivetrain.kernel.errors`, the same module (its place before the layers)."""

import sys

from .kernel import errors as _module

sys.modules[__name__] = _module
