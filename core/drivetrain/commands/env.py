"""``accelerate.commands.env``: ``drivetrain env``."""

from __future__ import annotations

import argparse
from typing import Any

from ..cli import env_cmd
from ._parsers import command_parser


def env_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    return command_parser(env_cmd.add_parser, "env", subparsers)


def env_command(args: argparse.Namespace) -> int:
    args.config_file = getattr(args, "config_file", None)
    args.json = getattr(args, "json", False)
    return env_cmd.run_env(args)
