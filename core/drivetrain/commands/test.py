"""``accelerate.commands.test``: ``drivetrain test``, the distributed self-test."""

from __future__ import annotations

import argparse
from typing import Any

from ..cli import test_cmd


def test_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """A parser taking ``--config-file`` (the options of ``drivetrain launch`` pass through)."""
    if subparsers is None:
        parser = argparse.ArgumentParser(prog="drivetrain test")
    else:
        parser = subparsers.add_parser("test", help="launch a short distributed self-test")
    parser.add_argument("--config-file", "--config_file", dest="config_file", default=None)
    parser.set_defaults(handler=test_command)
    return parser


def test_command(args: argparse.Namespace) -> int:
    argv = ["--config-file", args.config_file] if getattr(args, "config_file", None) else []
    return test_cmd.run(argv)


test_command.__test__ = False  # type: ignore[attr-defined]  # not a pytest test
test_command_parser.__test__ = False  # type: ignore[attr-defined]


if __name__ == "__main__":  # ``python -m``, as Accelerate's module runs
    import sys

    from ._parsers import run_as_main

    sys.exit(run_as_main("test"))
