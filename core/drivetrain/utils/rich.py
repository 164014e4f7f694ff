"""Rich tracebacks when ``rich`` is installed (``accelerate.utils.rich``): importing this module
installs them, as importing Accelerate's does."""

from __future__ import annotations

from .imports import is_rich_available

if is_rich_available():
    from rich.traceback import install

    install(show_locals=False)
