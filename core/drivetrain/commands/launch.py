"""``accelerate.commands.launch``: ``drivetrain launch``'s parser and runner."""

from __future__ import annotations

import argparse
from typing import Any

from ..cli import launch_cmd


def launch_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The parser of ``drivetrain launch`` (added to ``subparsers`` when given)."""
    parser = launch_cmd.build_parser()
    if subparsers is None:
        return parser
    return subparsers.add_parser("launch", parents=[parser], add_help=False, conflict_handler="resolve",
                                 help=parser.description)


def launch_command(args: argparse.Namespace) -> int:
    """Start the job parsed ``args`` describe, as ``drivetrain launch`` does."""
    return launch_cmd.launch_parsed(args)
