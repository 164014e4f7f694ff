"""``drivetrain.plugin_api.descriptors`` is :mod:`drivetrain.kernel.descriptors`, the same module."""

import sys

from ..kernel import descriptors as _module

sys.modules[__name__] = _module
