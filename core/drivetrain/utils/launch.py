"""``drivetrain.utils.launch`` is :mod:`drivetrain.cli.launch_environment`,
the same module (its place before the layers)."""

import sys

from ..cli import launch_environment as _module

sys.modules[__name__] = _module
