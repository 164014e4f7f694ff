"""``accelerate.commands.menu.helpers``: writing to the terminal with ANSI escape sequences."""

from __future__ import annotations

import enum
import sys


class Direction(enum.Enum):
    UP = 0
    DOWN = 1


def forceWrite(content: str, end: str = "") -> None:  # noqa: N802 (Accelerate's name)
    sys.stdout.write(str(content) + end)
    sys.stdout.flush()


def writeColor(content: str, color: int, end: str = "") -> None:  # noqa: N802 (Accelerate's name)
    forceWrite(f"\u001b[{color}m{content}\u001b[0m", end)


def reset_cursor() -> None:
    forceWrite("\r")


def move_cursor(num_lines: int, direction: str) -> None:
    """Move the cursor ``num_lines`` up, down, right or left (``direction`` as a letter or name)."""
    letter = {"UP": "A", "DOWN": "B", "RIGHT": "C", "LEFT": "D"}.get(direction.upper(), direction.upper())
    forceWrite(f"\033[{num_lines}{letter}")


def clear_line() -> None:
    forceWrite("\r\033[2K")


def linebreak() -> None:
    forceWrite("\n")
