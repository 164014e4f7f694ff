"""A plugin's options: launch arguments, ``Accelerator`` kwargs handlers, the config file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..cli.launch_parser import BackendFlag
from ..kernel.contributed import surface_getattr

if TYPE_CHECKING:  # pathlib waits for the command that reads the config file
    from pathlib import Path

__all__ = ["BackendFlag", "KwargsHandler", "bool_argument", "default_config_path"]


# Discovery imports this module in every process; the kwargs handlers' dataclasses (and the
# datetime module behind them) wait for the plugin that subclasses one.
__getattr__ = surface_getattr(__name__, lazy={"KwargsHandler": "drivetrain.runtime.kwargs_handlers:KwargsHandler"})


def bool_argument(text: str) -> bool:
    """The ``type=`` of a launch option that takes a boolean (``true/false``, ``1/0``, ``yes/no``)."""
    import argparse

    from ..kernel.environment import parse_bool

    try:
        return parse_bool(text, "value")
    except Exception:
        raise argparse.ArgumentTypeError(f"{text!r} is not true or false") from None


def default_config_path() -> Path:
    """Where ``drivetrain config`` writes, and ``drivetrain launch`` reads, the default config file."""
    from ..config.file import default_config_path as path

    return path()
