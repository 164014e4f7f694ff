"""``accelerate.commands.merge``: the command comes from the plugin that owns it."""

from __future__ import annotations

from ._parsers import plugin_module_getattr

__getattr__ = plugin_module_getattr(__name__.partition(".")[2])
