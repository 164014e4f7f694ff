"""``accelerate.commands.menu.selection_menu``: :class:`BulletMenu`, a numbered chooser."""

from __future__ import annotations

from typing import Any, Sequence

from ..config.config_utils import _ask_options


class BulletMenu:
    """Ask ``prompt`` with ``choices``; :meth:`run` returns the index chosen."""

    def __init__(self, prompt: str | None = None, choices: Sequence[Any] = ()) -> None:
        self.prompt = prompt or ""
        self.choices = list(choices)
        self.position = 0

    def run(self, default_choice: int = 0) -> int:
        self.position = _ask_options(self.prompt, self.choices, default=default_choice)
        return self.position
