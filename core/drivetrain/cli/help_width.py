"""argparse's parser and help formatter, without argparse's import of :mod:`shutil`.

argparse asks ``shutil.get_terminal_size`` for the width of the help each time it makes a
formatter, and it makes one for every argument added, to check its metavar: every command
paid for importing shutil and the compression modules shutil imports (a few milliseconds of
``drivetrain plugins list``). The width here is found the same way, through :mod:`os`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

_FALLBACK_COLUMNS = 80


def terminal_columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size().columns`` gives it: ``COLUMNS`` when
    set to a positive number, else the width of the terminal of standard output, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else _FALLBACK_COLUMNS


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, two columns narrower than the terminal as argparse makes it."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None, **kwargs: Any) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         terminal_columns() - 2 if width is None else width, **kwargs)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with :class:`HelpFormatter` by default; its sub-command parsers are of
    this class too (argparse makes them of the parent's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
