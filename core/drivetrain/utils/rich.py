"""``drivetrain.utils.rich`` is :mod:`drivetrain.services.rich_tracebacks`,
the same module (its place before the layers)."""

import sys

from ..services import rich_tracebacks as _module

sys.modules[__name__] = _module
