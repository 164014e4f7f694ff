"""``drivetrain.plugin_manager`` is :mod:`drivetrain.kernel.plugin_manager`,
the same module (its place before the layers)."""

import sys

from .kernel import plugin_manager as _module

sys.modules[__name__] = _module
