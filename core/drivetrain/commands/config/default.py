"""``accelerate.commands.config.default``: ``drivetrain config default``, a config for this machine
written without questions."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Sequence

from ...cli import config_cmd
from ...config import file as _file
from .config_args import default_config_file, load_config_from_file

description = ("Write a config file for this machine without asking anything: every device of the detected "
               "platform, or one CPU process.")


def write_basic_config(mixed_precision: str = "no",
                       save_location: str | os.PathLike = default_config_file) -> Path | bool:
    """Write a config for this machine at ``save_location``; ``False`` (nothing written) when a
    file is already there. See :func:`drivetrain.config.write_basic_config`."""
    return _file.write_basic_config(mixed_precision, save_location)


def default_command_parser(parser: Any, parents: Sequence[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add the ``default`` action to ``parser`` (the sub-parsers of ``config``) and return it."""
    default = parser.add_parser("default", parents=list(parents), help=description, description=description)
    default.add_argument("--config-file", "--config_file", default=default_config_file, dest="config_file",
                         help=f"where to write the file (default: {default_config_file})")
    default.add_argument("--mixed-precision", "--mixed_precision", default="no",
                         help="no, fp16, bf16 or another installed precision (default: no)")
    default.set_defaults(func=default_config_command, handler=default_config_command)
    return default


def default_config_command(args: argparse.Namespace) -> int:
    """Run ``drivetrain config default`` for parsed ``args`` (``config_file``, ``mixed_precision``)."""
    return config_cmd.run_default(args)


__all__ = ["default_command_parser", "default_config_command", "default_config_file", "description",
           "load_config_from_file", "write_basic_config"]
