"""``accelerate.commands.menu.keymap``: single key presses read from a terminal."""

from __future__ import annotations

import os
import sys

ARROW_KEY_FLAG = 1 << 8
KEYMAP: dict[str, int] = {
    "tab": ord("\t"), "newline": ord("\r"), "esc": 27, "interrupt": 3, "mod_int": 91, "undefined": sys.maxsize,
    "up": 65 + ARROW_KEY_FLAG, "down": 66 + ARROW_KEY_FLAG, "right": 67 + ARROW_KEY_FLAG, "left": 68 + ARROW_KEY_FLAG,
    "insert": 50, "delete": 51, "pg_up": 53, "pg_down": 54,
}
KEYMAP["arrow_begin"], KEYMAP["arrow_end"] = KEYMAP["up"], KEYMAP["left"]
KEYMAP.update({str(digit): ord(str(digit)) for digit in range(10)})


def get_raw_chars() -> str:
    """One character from standard input, read without waiting for a newline where it is a terminal."""
    if os.name == "nt" or not sys.stdin.isatty():
        return sys.stdin.read(1)
    import termios
    import tty

    descriptor = sys.stdin.fileno()
    saved = termios.tcgetattr(descriptor)
    try:
        tty.setraw(descriptor)
        return sys.stdin.read(1)
    finally:
        termios.tcsetattr(descriptor, termios.TCSADRAIN, saved)


def get_character() -> str | int:
    """A key press: a printable character, or the ``KEYMAP`` code of an arrow key or ``undefined``."""
    char = get_raw_chars()
    if ord(char) in (KEYMAP["interrupt"], KEYMAP["newline"]):
        return char
    if ord(char) == KEYMAP["esc"] and get_raw_chars() == chr(KEYMAP["mod_int"]):
        code = ord(get_raw_chars())
        if KEYMAP["arrow_begin"] <= code + ARROW_KEY_FLAG <= KEYMAP["arrow_end"]:
            return chr(code + ARROW_KEY_FLAG)
        return KEYMAP["undefined"]
    return char if char.isprintable() else KEYMAP["undefined"]
