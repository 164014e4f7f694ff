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


description = ("Ask a few questions (on standard input) and write the config file `drivetrain launch` reads; the "
               "questions come from the core and from the installed plugins.")


def get_user_input() -> Any:
    """The answers to ``drivetrain config``'s questions as a ``ClusterConfig`` (drivetrain runs on
    the local machine or a cluster; it does not launch on SageMaker, so it does not ask which)."""
    from .cluster import get_cluster_input

    return get_cluster_input()


if __name__ == "__main__":  # ``python -m``, as Accelerate's module runs
    import sys

    from .._parsers import run_as_main

    sys.exit(run_as_main("config"))
