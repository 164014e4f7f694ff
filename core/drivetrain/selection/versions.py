"""Version comparisons (``accelerate.utils.versions``)."""

from __future__ import annotations

import importlib.metadata
import operator
from typing import Callable

from packaging.version import InvalidVersion, Version, parse
from ..kernel.contributed import surface_getattr

STR_OPERATION_TO_FUNC: dict[str, Callable[[object, object], bool]] = {
    ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<=": operator.le, "<": operator.lt,
}


def _version_of(library_or_version: str | Version) -> Version:
    if isinstance(library_or_version, Version):
        return library_or_version
    try:
        return parse(importlib.metadata.version(library_or_version))
    except importlib.metadata.PackageNotFoundError:
        try:
            return parse(library_or_version)
        except InvalidVersion:
            raise importlib.metadata.PackageNotFoundError(
                f"{library_or_version!r} is neither an installed distribution nor a version") from None


def compare_versions(library_or_version: str | Version, operation: str, requirement_version: str) -> bool:
    """Whether an installed library's version (or a version) stands in ``operation`` to another.

    Args:
        library_or_version: a distribution name (``"torch"``), a version string or a ``Version``.
        operation: one of ``>``, ``>=``, ``==``, ``!=``, ``<=``, ``<``.
        requirement_version: the version to compare with.
    """
    if operation not in STR_OPERATION_TO_FUNC:
        raise ValueError(f"operation must be one of {list(STR_OPERATION_TO_FUNC)}, not {operation!r}")
    return STR_OPERATION_TO_FUNC[operation](_version_of(library_or_version), parse(requirement_version))


def torch_version() -> Version:
    import torch

    return parse(parse(torch.__version__).base_version)


def is_torch_version(operation: str, version: str) -> bool:
    """Whether the installed torch (its release, without local suffixes) is ``operation version``."""
    if operation not in STR_OPERATION_TO_FUNC:
        raise ValueError(f"operation must be one of {list(STR_OPERATION_TO_FUNC)}, not {operation!r}")
    return STR_OPERATION_TO_FUNC[operation](torch_version(), parse(version))


# names a plugin contributes to this module (keys "utils.versions.<name>"), served on first access
__getattr__ = surface_getattr("drivetrain.utils.versions")
