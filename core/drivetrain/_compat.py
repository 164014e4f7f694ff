"""Old import paths of packages that moved into their layer.

``alias_package("drivetrain.checkpointing", "drivetrain.services.checkpointing")`` makes the old
name *be* the moved package, and each of its submodules on import
(``drivetrain.checkpointing.layout is drivetrain.services.checkpointing.layout``): an alias of
the package alone would let Python load a second copy of a submodule under the old name, whose
``mock.patch`` targets and classes would not be the ones the core uses.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

_ALIASES: dict[str, str] = {}


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``old.sub`` as the module ``new.sub`` itself (not a copy)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        real = _real_name(fullname)
        if real is None or importlib.util.find_spec(real) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        # the moved module keeps its own name, spec and file: the import system only sets what is missing
        return importlib.import_module(_real_name(spec.name) or spec.name)

    def exec_module(self, module: ModuleType) -> None:
        pass


def _real_name(fullname: str) -> str | None:
    for old, new in _ALIASES.items():
        if fullname.startswith(old + "."):
            return new + fullname[len(old):]
    return None


_FINDER = _AliasFinder()


def alias_package(old: str, new: str) -> None:
    """Make ``old`` and every ``old.<submodule>`` the modules of the package ``new``."""
    _ALIASES[old] = new
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    sys.modules[old] = importlib.import_module(new)
