"""``accelerate.commands.config``: ``drivetrain config`` and the modules at Accelerate's paths.

``config_args`` holds the config-file dataclasses, ``default`` and ``update`` the two actions,
``cluster`` the questionnaire, ``config_utils`` the question helpers. All of them are thin over
:mod:`drivetrain.config`, which reads, checks and writes the file.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from .config import config_command, config_command_parser, default_config_command, update_config_command

get_config_parser = config_command_parser


def __getattr__(name: str) -> object:
    # Accelerate offers these two here too (transformers' `env` command imports them); they load
    # the plugins' config sections, so they are imported only when asked for.
    if name in ("default_config_file", "load_config_from_file"):
        from . import config_args

        return getattr(config_args, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """``drivetrain config`` as a function: parse ``argv`` and run the chosen action."""
    parser: argparse.ArgumentParser = get_config_parser()
    return config_command(parser.parse_args(argv))


__all__ = ["config_command", "config_command_parser", "default_config_command", "default_config_file",
           "get_config_parser", "load_config_from_file", "main", "update_config_command"]
