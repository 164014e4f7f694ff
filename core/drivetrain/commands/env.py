"""``accelerate.commands.env``: ``drivetrain env``."""

from __future__ import annotations

import argparse
from shutil import which
from typing import Any

from ..cli import env_cmd
from ._parsers import command_parser


def env_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    return command_parser(env_cmd.add_parser, "env", subparsers)


def env_command(args: argparse.Namespace) -> dict[str, Any]:
    """Print the environment report and return it (Accelerate's callers read the dict), with where
    the ``drivetrain`` command is found on ``PATH``."""
    report = env_cmd.collect(getattr(args, "config_file", None))
    report["`drivetrain` bash location"] = which("drivetrain") or "Not found"
    if getattr(args, "json", False):
        env_cmd.emit(report, default=str)
    else:
        print(env_cmd.render(report))
    return report


if __name__ == "__main__":  # ``python -m``, as Accelerate's module runs
    import sys

    from ._parsers import run_as_main

    sys.exit(run_as_main("env"))
