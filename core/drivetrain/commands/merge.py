"""``accelerate.commands.merge``: the command comes from the plugin that owns it."""

from __future__ import annotations

from ._parsers import plugin_module_getattr

__getattr__ = plugin_module_getattr(__name__.partition(".")[2])


if __name__ == "__main__":  # ``python -m``, as Accelerate's module runs
    import sys

    from ._parsers import run_as_main

    sys.exit(run_as_main("merge-weights"))
