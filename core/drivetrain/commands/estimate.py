"""``accelerate.commands.estimate``: ``drivetrain estimate-memory``."""

from __future__ import annotations

import argparse
from typing import Any

from ..cli import estimate_cmd
from ._parsers import command_parser

create_empty_model = estimate_cmd.build_empty_model


def estimate_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    return command_parser(estimate_cmd.add_parser, "estimate-memory", subparsers)


def estimate_command(args: argparse.Namespace) -> int:
    return estimate_cmd.run_estimate(args)


def main() -> int:
    """The ``drivetrain-estimate-memory`` console script."""
    parser = estimate_command_parser()
    return estimate_command(parser.parse_args())
