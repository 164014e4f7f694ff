"""``drivetrain.commands.config.config_args`` is :mod:`drivetrain.config.config_classes`,
the same module (Accelerate's path of the config file's dataclasses)."""

import sys

from ...config import config_classes as _module

sys.modules[__name__] = _module
