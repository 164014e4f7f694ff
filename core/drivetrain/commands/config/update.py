"""``accelerate.commands.config.update``: ``drivetrain config update``, an existing config file
rewritten with every current key, its values kept."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Sequence

from ...cli import config_cmd
from ...config import file as _file
from .config_args import default_config_file

description = "Rewrite an existing config file with every key this version knows, keeping its values."


def update_config(args: argparse.Namespace | str | os.PathLike | None = None) -> Path:
    """Rewrite the config file ``args.config_file`` names (or ``args`` itself, a path; the default
    file when neither names one) and return where it is."""
    path = getattr(args, "config_file", args) if isinstance(args, argparse.Namespace) else args
    return _file.update_config(path)


def update_command_parser(parser: Any, parents: Sequence[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add the ``update`` action to ``parser`` (the sub-parsers of ``config``) and return it."""
    update = parser.add_parser("update", parents=list(parents), help=description, description=description)
    update.add_argument("--config-file", "--config_file", default=None, dest="config_file",
                        help=f"the file to update (default: {default_config_file})")
    update.set_defaults(func=update_config_command, handler=update_config_command)
    return update


def update_config_command(args: argparse.Namespace) -> int:
    """Run ``drivetrain config update`` for parsed ``args``."""
    return config_cmd.run_update(args)


__all__ = ["description", "update_command_parser", "update_config", "update_config_command"]
