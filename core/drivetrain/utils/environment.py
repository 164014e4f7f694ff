"""``drivetrain.utils.environment`` is :mod:`drivetrain.runtime.environment_helpers`,
the same module (its place before the layers)."""

import sys

from ..runtime import environment_helpers as _module

sys.modules[__name__] = _module
