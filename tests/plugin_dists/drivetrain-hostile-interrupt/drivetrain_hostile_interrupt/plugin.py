"""Raises KeyboardInterrupt while being imported (no Ctrl-C was pressed)."""

raise KeyboardInterrupt("raised by a plugin, not by the user")
