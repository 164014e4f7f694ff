"""``drivetrain.accelerator`` is :mod:`drivetrain.facade.accelerator`,
the same module (its place before the layers)."""

import sys

from .facade import accelerator as _module

sys.modules[__name__] = _module
