"""Accelerate's ``<name>_command_parser(subparsers=None)`` convention over drivetrain's CLI modules."""

from __future__ import annotations

import argparse
import importlib
import logging
from types import ModuleType
from typing import Any, Callable

logger = logging.getLogger(__name__)


def command_parser(add_parser: Callable[[Any], None], name: str, subparsers: Any = None) -> argparse.ArgumentParser:
    """The parser of command ``name``: added to ``subparsers`` when given, else standalone."""
    if subparsers is None:
        root = argparse.ArgumentParser(prog="drivetrain")
        subparsers = root.add_subparsers(dest="command")
        add_parser(subparsers)
        parser = subparsers.choices[name]
        parser.prog = f"drivetrain {name}"
        return parser
    add_parser(subparsers)
    return subparsers.choices[name]


def run_handler(args: argparse.Namespace) -> int:
    """Run parsed arguments of a command built by :func:`command_parser`."""
    handler = getattr(args, "handler", None)
    if handler is None:
        raise SystemExit("no command chosen; see --help")
    return int(handler(args) or 0)


def run_as_main(command: str) -> int:
    """``python -m drivetrain.commands.<module> ARGS`` (and Accelerate's name for it):
    ``drivetrain <command> ARGS``, with its errors reported as the command reports them."""
    import sys

    from ..cli.main import main

    return main([command, *sys.argv[1:]])


def plugin_module_getattr(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` answering with what plugins contribute to ``drivetrain.<module>``."""
    from ..kernel.contributed import surface_getattr

    return surface_getattr(f"drivetrain.{module}", missing_hint=": the plugin that provides this command is not "
                           "installed (see `drivetrain plugins list`)")


def plugin_command_module(module: str) -> ModuleType | None:
    """The plugin module that provides every name contributed to ``drivetrain.<module>``, or
    ``None`` (no plugin provides one, or they come from several modules).

    ``drivetrain.commands.<name>`` becomes that module itself, as Accelerate's command modules
    are one module each: a test or a user that patches ``drivetrain.commands.to_fsdp2.load_config``
    then changes what the command calls.
    """
    from ..kernel.contributed import module_public_names

    sources = {ref.partition(":")[0] for ref in module_public_names(module).values()}
    if len(sources) != 1:
        return None
    try:
        return importlib.import_module(sources.pop())
    except Exception as exc:  # a broken plugin: the module's __getattr__ reports the missing names
        logger.debug("the module behind drivetrain.%s does not import: %s", module, exc)
        return None
