"""Reading and writing a config file as written, for a plugin command that works on the file itself."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["read_config_file", "write_config_file"]


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """A config file's keys as written, unchecked (for a command that rewrites a file, or reads a
    few keys of one whose plugins may not be installed here): the safe loader, and one clear
    :class:`~drivetrain.plugin_api.ConfigError` (``ConfigFileNotFoundError`` when it does not
    exist) for a missing, unreadable or malformed file."""
    from ..config.file import read_config_file as read

    return read(path)


def write_config_file(data: dict[str, Any], path: str | os.PathLike) -> None:
    """Write ``data`` to ``path`` (YAML, or JSON for a ``.json`` name) in one step: an interrupted
    write leaves the old file whole."""
    from pathlib import Path

    from ..config.file import dump

    dump(data, Path(path))
