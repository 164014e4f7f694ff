"""Rich tracebacks when ``rich`` is installed (``accelerate.utils.rich``): importing this module
installs them, as importing Accelerate's does."""

from __future__ import annotations

from .availability import is_rich_available
from ..kernel.contributed import surface_getattr

if is_rich_available():
    from rich.traceback import install

    install(show_locals=False)


# names a plugin contributes to this module (keys "utils.rich.<name>"), served on first access
__getattr__ = surface_getattr("drivetrain.utils.rich")
