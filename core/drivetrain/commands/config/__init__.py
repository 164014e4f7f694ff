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


def main(argv: Sequence[str] | None = None) -> int:
    """``drivetrain config`` as a function: parse ``argv`` and run the chosen action."""
    parser: argparse.ArgumentParser = get_config_parser()
    return config_command(parser.parse_args(argv))


__all__ = ["config_command", "config_command_parser", "default_config_command", "get_config_parser", "main",
           "update_config_command"]
