"""``drivetrain.collectives`` is :mod:`drivetrain.runtime.collectives`,
the same module (its place before the layers)."""

import sys

from .runtime import collectives as _module

sys.modules[__name__] = _module
