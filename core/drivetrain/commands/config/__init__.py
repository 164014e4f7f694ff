"""``accelerate.commands.config``: ``drivetrain config`` and the modules at Accelerate's paths.

``config_args`` holds the config-file dataclasses and :func:`load_config_from_file`,
``default`` and ``update`` the two actions, ``cluster`` the questionnaire, ``config_utils``
the question helpers, ``sagemaker`` what drivetrain says about SageMaker. All of them are thin
over :mod:`drivetrain.config`, which reads, checks and writes the file.
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

from .config import config_command, config_command_parser, default_config_command, update_config_command
from .config_args import default_config_file, load_config_from_file
from .default import default_command_parser
from .update import update_command_parser


def get_config_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The parser of ``drivetrain config`` with its ``default`` and ``update`` actions (added to
    ``subparsers`` when given)."""
    return config_command_parser(subparsers)


def main(argv: Sequence[str] | None = None) -> int:
    """``drivetrain config`` as a function: parse ``argv`` and run the chosen action."""
    parser: argparse.ArgumentParser = get_config_parser()
    return config_command(parser.parse_args(argv))


__all__ = ["config_command", "config_command_parser", "default_command_parser", "default_config_command",
           "default_config_file", "get_config_parser", "load_config_from_file", "main", "update_command_parser",
           "update_config_command"]
