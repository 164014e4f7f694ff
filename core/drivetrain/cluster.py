"""``drivetrain.cluster`` is :mod:`drivetrain.kernel.cluster`,
the same module (its place before the layers)."""

import sys

from .kernel import cluster as _module

sys.modules[__name__] = _module
