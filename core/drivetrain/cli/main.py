"""Entry point of the ``drivetrain`` command: builds the parser and runs a sub-command.

Sub-command modules are imported only when their command runs, so ``drivetrain --help`` and
``drivetrain plugins list`` stay fast and never import torch.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from typing import Sequence

from ..kernel.errors import DrivetrainError
from ..kernel.version import __version__
from .help_width import ArgumentParser
from .json_output import json_only_stdout

# command name -> module in drivetrain.cli that defines add_parser(subparsers)
_BUILT_IN_COMMANDS = ("plugins", "launch", "config", "env", "test", "estimate", "checkpoint")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command's parser; with ``command`` (a built-in one), that command's alone.

    A built-in command's name is never a plugin's, so running one (``drivetrain plugins
    list``) needs neither the other commands' modules nor the plugins' commands.
    """
    parser = ArgumentParser(
        prog="drivetrain",
        description="Run one PyTorch script anywhere; every backend is a plugin.",
    )
    parser.add_argument("--version", action="version", version=f"drivetrain {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in (command,) if command in _BUILT_IN_COMMANDS else _BUILT_IN_COMMANDS:
        importlib.import_module(f"drivetrain.cli.{name}_cmd").add_parser(subparsers)
    if command not in _BUILT_IN_COMMANDS:
        _add_plugin_commands(subparsers)
    return parser


def _add_plugin_commands(subparsers: argparse._SubParsersAction) -> None:
    from ..kernel.plugin_manager import PluginStatus, get_plugin_manager

    manager = get_plugin_manager(check_strict=False)  # strict mode fails in the command, in one line
    caller = manager.hooks.hook.drivetrain_add_cli_commands
    for impl in caller.get_hookimpls():
        if manager.records[impl.plugin_name].status is PluginStatus.FAILED:
            continue
        try:
            impl.function(subparsers=subparsers)
        except Exception as exc:  # a plugin's command must not break the others
            print(f"warning: plugin {impl.plugin_name!r} could not add its commands: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``drivetrain`` command with ``argv`` (default: this process's command line)."""
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    with json_only_stdout(argv):  # plugins load below: what they print must not spoil the JSON
        status = _main(argv)
    if from_command_line:
        # The process ends next, and the interpreter's last collection would walk every object
        # the plugins' modules made, to free what the exit frees anyway: a fifth of a quick
        # command's time (`drivetrain plugins list`). Frozen objects are skipped; every file a
        # command writes is closed before it returns, and atexit handlers still run.
        gc.freeze()
    return status


def _main(argv: list[str]) -> int:
    if argv[:1] == ["launch"]:  # its options, and the script's own, are parsed by launch itself
        from .launch_cmd import run

        return _guarded(run, argv[1:])
    if argv[:1] == ["test"]:  # its options are launch's, passed through
        from .test_cmd import run as run_test

        return _guarded(run_test, argv[1:])
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    return _guarded(handler, args)


def launch_main() -> int:
    """The ``drivetrain-launch`` console script: ``drivetrain launch`` under Accelerate's other name."""
    return main(["launch", *sys.argv[1:]])


def config_main() -> int:
    """The ``drivetrain-config`` console script: ``drivetrain config``."""
    return main(["config", *sys.argv[1:]])


def _guarded(handler, args) -> int:
    try:
        return int(handler(args) or 0)
    except DrivetrainError as exc:
        print(f"drivetrain: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
