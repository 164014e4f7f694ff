"""``drivetrain.process_exits`` is :mod:`drivetrain.runtime.process_exits`,
the same module (its place before the layers)."""

import sys

from .runtime import process_exits as _module

sys.modules[__name__] = _module
