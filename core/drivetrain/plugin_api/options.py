"""A plugin's options: launch arguments, ``Accelerator`` kwargs handlers, the config file."""

from __future__ import annotations

from pathlib import Path

from ..cli.launch_parser import BackendFlag
from ..runtime.kwargs_handlers import KwargsHandler

__all__ = ["BackendFlag", "KwargsHandler", "bool_argument", "default_config_path"]


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
