"""``drivetrain.utils.tqdm`` is :mod:`drivetrain.services.progress_bar`,
the same module (its place before the layers)."""

import sys

from ..services import progress_bar as _module

sys.modules[__name__] = _module
