"""``drivetrain.plugin_guard`` is :mod:`drivetrain.kernel.plugin_guard`,
the same module (its place before the layers)."""

import sys

from .kernel import plugin_guard as _module

sys.modules[__name__] = _module
