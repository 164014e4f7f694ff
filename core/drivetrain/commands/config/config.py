"""``accelerate.commands.config.config``: the parser and runner of ``drivetrain config``."""

from __future__ import annotations

import argparse
from typing import Any

from ...cli import config_cmd
from .._parsers import command_parser, run_handler


def config_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    return command_parser(config_cmd.add_parser, "config", subparsers)


def config_command(args: argparse.Namespace) -> int:
    return run_handler(args)


def default_config_command(args: argparse.Namespace) -> int:
    return config_cmd.run_default(args)


def update_config_command(args: argparse.Namespace) -> int:
    return config_cmd.run_update(args)
