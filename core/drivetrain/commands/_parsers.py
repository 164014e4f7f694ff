"""Accelerate's ``<name>_command_parser(subparsers=None)`` convention over drivetrain's CLI modules."""

from __future__ import annotations

import argparse
from typing import Any, Callable


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


def plugin_module_getattr(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` answering with what plugins contribute to ``drivetrain.<module>``."""

    def __getattr__(name: str) -> Any:
        from ..kernel.contributed import resolve_module_name

        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return resolve_module_name(module, name)
        except AttributeError:
            raise AttributeError(f"module 'drivetrain.{module}' has no attribute {name!r}: the plugin that "
                                 "provides this command is not installed (see `drivetrain plugins list`)") from None

    return __getattr__
