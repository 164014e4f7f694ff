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
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

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


class UncheckedWheel(ImportError):
    """The alias was installed from a wheel built in another environment: nothing checked this one."""


CHECKED_FOR = Path(__file__).with_name("checked_for.json")  # written into each wheel by the build


def check_installed_where_built() -> None:
    """Refuse to run from a place the build did not check for a real Accelerate.

    pip runs no code when it installs a wheel, so a wheel built elsewhere and installed here
    may have replaced a real Accelerate without the build's refusal. An editable install or
    a source tree has no record and needs none: nothing was built for elsewhere.
    """
    try:
        record = json.loads(CHECKED_FOR.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        record = {}
    checked = record.get("site_directories") if isinstance(record, dict) else None
    here = os.path.realpath(Path(__file__).resolve().parent.parent)
    if checked == "any" or (isinstance(checked, list) and here in checked):
        return  # "any": built with `-C portable=1`, its installer uninstalled Accelerate first
    raise UncheckedWheel(
        f"this `{ALIAS_NAME}` alias was installed in {here} from a wheel built for another environment, so nothing "
        "checked that it did not replace a real Hugging Face Accelerate here: install the alias from drivetrain's "
        "source (`pip install --force-reinstall --no-deps <drivetrain source>/compat/accelerate`), which refuses "
        f"to replace one (and if it did replace one: `pip uninstall {ALIAS_NAME}` and reinstall that Accelerate)",
        name=ALIAS_NAME)


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

    def get_code(self, fullname: str) -> Any:
        """The code of drivetrain's module: ``python -m accelerate.commands.launch`` runs it as ``__main__``."""
        spec = importlib.util.find_spec(self.target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise ImportError(f"{self.target} has no code to run as {fullname}", name=fullname)
        return spec.loader.get_code(self.target)


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


class DrivetrainMissing(ImportError):
    """The alias is installed but drivetrain, which serves every module of it, is not."""


def import_drivetrain() -> ModuleType:
    try:
        return importlib.import_module(TARGET_NAME)
    except ModuleNotFoundError as error:
        if error.name != TARGET_NAME:
            raise
        raise DrivetrainMissing(
            f"the `{ALIAS_NAME}` alias is served by drivetrain, which is not installed: `pip install drivetrain` "
            f"(or `pip uninstall {ALIAS_NAME}` to remove the alias)", name=TARGET_NAME) from None


def install() -> ModuleType:
    """Put the finder first on ``sys.meta_path`` (once) and return the ``drivetrain`` package."""
    check_no_real_accelerate()
    check_installed_where_built()
    if not any(isinstance(finder, AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
    return import_drivetrain()


__all__ = ["AliasFinder", "DrivetrainMissing", "RealAccelerateInstalled", "UncheckedWheel", "check_installed_where_built",
           "check_no_real_accelerate", "conflict_message", "install", "real_accelerate"]
