"""``drivetrain.local_sgd`` is :mod:`drivetrain.facade.local_sgd`,
the same module (its place before the layers)."""

import sys

from .facade import local_sgd as _module

sys.modules[__name__] = _module
