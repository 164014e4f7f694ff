"""A progress bar shown by one process (``accelerate.utils.tqdm``)."""

from __future__ import annotations

import weakref
from typing import Any

from ..kernel.contributed import surface_getattr

# The bars drawn through tqdm() below, which the step monitor (MonitorKwargs) writes its
# figures into; a bar closed and dropped leaves the set by itself.
_DRAWN_BARS: "weakref.WeakSet[Any]" = weakref.WeakSet()


def tqdm(*args: Any, main_process_only: bool = True, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm`` that, by default, only the local main process of each machine draws.

    The bar still iterates on every process (they all need the items); on the others it is
    disabled. Accelerate's older spelling with ``main_process_only`` as the first positional
    argument is accepted.
    """
    try:
        from tqdm.auto import tqdm as _tqdm
    except ImportError:
        from ..kernel.errors import DrivetrainError

        raise DrivetrainError("progress bars need tqdm: pip install tqdm") from None
    if args and isinstance(args[0], bool):
        main_process_only, args = args[0], args[1:]
    if main_process_only:
        from ..runtime.state import PartialState

        kwargs["disable"] = kwargs.get("disable", False) or not PartialState().is_local_main_process
    bar = _tqdm(*args, **kwargs)
    if not getattr(bar, "disable", False):
        _DRAWN_BARS.add(bar)
    return bar


def drawn_bars() -> list[Any]:
    """The bars of this process drawn through :func:`tqdm` and still open."""
    return [bar for bar in list(_DRAWN_BARS) if not getattr(bar, "disable", False)]


# names a plugin contributes to this module (keys "utils.tqdm.<name>"), served on first access
__getattr__ = surface_getattr("drivetrain.utils.tqdm")
