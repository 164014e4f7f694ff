"""``drivetrain.public_names`` is :mod:`drivetrain.kernel.contributed`,
the same module (its place before the layers)."""

import sys

from .kernel import contributed as _module

sys.modules[__name__] = _module
