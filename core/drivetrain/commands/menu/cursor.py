"""``accelerate.commands.menu.cursor``: hiding the terminal's cursor while a menu is shown."""

from __future__ import annotations

import contextlib
from typing import Iterator

from .helpers import forceWrite


def hide_cursor() -> None:
    forceWrite("\033[?25l")


def show_cursor() -> None:
    forceWrite("\033[?25h")


@contextlib.contextmanager
def hide() -> Iterator[None]:
    """The cursor hidden for the block, shown again however it ends."""
    hide_cursor()
    try:
        yield
    finally:
        show_cursor()
