"""The selection layer: which platform, strategy and precision a run uses, from what was asked.

Requests and Accelerate's ``USE_<NAME>`` variables (``backend_variables.py``), what is installed
and usable (``detection.py``), the choice itself (``choice.py``), Accelerate's enums, file
names and version checks, and where the ``Accelerator``'s backend arguments go
(``backend_arguments.py``). Nothing here starts a process or imports torch at import time.

``drivetrain.selection`` was the choice module before the layers: its names
(``Requests``, ``select``, ``requests_from_env``, ...) are still served from here, on first
use; the core imports :mod:`drivetrain.selection.choice`.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    # Not ``from . import choice``: while choice is not loaded, that form asks this very
    # function for ``choice`` first, and recurses without end.
    choice = importlib.import_module(f"{__name__}.choice")
    try:
        return getattr(choice, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
