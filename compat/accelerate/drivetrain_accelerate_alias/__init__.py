"""The alias that serves ``accelerate`` and its submodules with drivetrain's module objects.

A meta-path finder answers every ``accelerate.X`` import with the module ``drivetrain.X``: the
same object, not a copy, so ``isinstance`` checks, ``mock.patch("accelerate.utils.X")`` and
pickles agree between the two names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
from types import ModuleType

ALIAS_LABEL = "+drivetrain"  # the local version label of this distribution
ALIAS_NAME = "accelerate"
TARGET_NAME = "drivetrain"


class RealAccelerateInstalled(ImportError):
    """A Hugging Face Accelerate is installed beside the alias; only one may own the name."""


def real_accelerate() -> str | None:
    """Where a real Accelerate distribution is visible on ``sys.path``, or ``None``."""
    for dist in importlib.metadata.distributions(name=ALIAS_NAME):
        if not str(dist.version).endswith(ALIAS_LABEL):
            return f"accelerate {dist.version} in {dist.locate_file('')}"
    return None


def conflict_message(found: str) -> str:
    return (f"the drivetrain `accelerate` alias cannot run beside a real Hugging Face Accelerate ({found}): "
            f"`pip uninstall accelerate` until `pip show accelerate` reports version 1.15.0{ALIAS_LABEL}, "
            "then reinstall the one you want")


def check_no_real_accelerate() -> None:
    found = real_accelerate()
    if found is not None:
        raise RealAccelerateInstalled(conflict_message(found))


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder: exec_module replaces it

    def exec_module(self, module: ModuleType) -> None:
        # The import system hands back whatever sys.modules holds under the name afterwards,
        # so the alias name ends up bound to drivetrain's module object, whose own __spec__
        # and __name__ stay untouched.
        sys.modules[module.__name__] = importlib.import_module(self.target)


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``accelerate.X`` as the module ``drivetrain.X`` (and nothing where drivetrain has none)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(ALIAS_NAME + "."):
            return None
        target_name = TARGET_NAME + fullname[len(ALIAS_NAME):]
        try:
            found = importlib.util.find_spec(target_name)
        except ModuleNotFoundError:
            found = None
        if found is None:
            # Stop the path finder from loading drivetrain's files a second time under this name.
            raise ModuleNotFoundError(f"No module named {fullname!r} (drivetrain has no {target_name!r})",
                                      name=fullname)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(target_name),
                                               is_package=found.submodule_search_locations is not None)


def install() -> ModuleType:
    """Put the finder first on ``sys.meta_path`` (once) and return the ``drivetrain`` package."""
    check_no_real_accelerate()
    if not any(isinstance(finder, AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
    return importlib.import_module(TARGET_NAME)


__all__ = ["AliasFinder", "RealAccelerateInstalled", "check_no_real_accelerate", "conflict_message", "install",
           "real_accelerate"]
