"""``accelerate.commands.to_fsdp2``: the module of the plugin that owns the command.

While that plugin is installed this name is its module (the same object); without it, names
asked for here say which plugin is missing.
"""

from __future__ import annotations

import sys

from ._parsers import plugin_command_module, plugin_module_getattr

__getattr__ = plugin_module_getattr(__name__.partition(".")[2])

_owner = plugin_command_module(__name__.partition(".")[2])
if _owner is not None:
    sys.modules[__name__] = _owner
