"""``accelerate.commands.launch``: ``drivetrain launch``'s parser and runner."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..cli import launch_cmd
from ._parsers import run_as_main


def launch_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The parser of ``drivetrain launch`` (added to ``subparsers`` when given)."""
    parser = launch_cmd.build_parser()
    if subparsers is None:
        return parser
    return subparsers.add_parser("launch", parents=[parser], add_help=False, conflict_handler="resolve",
                                 help=parser.description, formatter_class=parser.formatter_class,
                                 allow_abbrev=False)


def launch_command(args: argparse.Namespace) -> int:
    """Start the job parsed ``args`` describe, as ``drivetrain launch`` does."""
    return launch_cmd.launch_parsed(args)


def _validate_launch_command(args: argparse.Namespace) -> tuple[argparse.Namespace, Any, bool]:
    """``args`` completed as ``drivetrain launch`` completes them (config file merged, defaults
    filled), the config file's contents (``None`` without one), and whether ``mixed_precision``
    came from the file."""
    from ..config.file import find_config_path
    from ..cli.launch_environment import _resolved
    from .config.config_args import load_config_from_file

    given_precision = getattr(args, "mixed_precision", None)
    named = getattr(args, "config_file", None)
    path = named if named is not None else find_config_path()
    defaults = load_config_from_file(path) if path is not None else None
    if defaults is not None:
        # the plugins' options too (``fsdp_sync_module_states`` from the file's fsdp_config)
        launch_cmd.merge_config(args, launch_cmd.build_parser())
    args = _resolved(args)
    from_file = given_precision is None and defaults is not None and getattr(args, "mixed_precision", None) is not None
    return args, defaults, from_file


def main() -> int:
    """``drivetrain launch`` with this process's command line (``python -m`` runs it)."""
    return run_as_main("launch")


if __name__ == "__main__":
    sys.exit(main())
