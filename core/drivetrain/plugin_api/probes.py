"""Cheap questions a plugin asks before importing anything: is a library installed, at which
version, and what another plugin contributes."""

from __future__ import annotations

from typing import Any

from ..services.availability import absent_probe, is_package_available
from ..selection.versions import compare_versions, is_torch_version

__all__ = ["absent_probe", "compare_versions", "contributed", "is_package_available", "is_torch_version"]

_MISSING = object()


def contributed(key: str, default: Any = _MISSING) -> Any:
    """The object some plugin contributes under ``key`` through ``drivetrain_public_names``
    (``"utils.check_cuda_fp8_capability"``), or its stand-in from ``drivetrain_fallback_names``.

    This is how a plugin uses what another plugin offers without importing it: the other
    plugin may be absent or blocked, and then ``default`` is returned (``AttributeError``
    when none is given).
    """
    from ..kernel.contributed import resolve_module_name

    module, _, name = key.rpartition(".")
    try:
        return resolve_module_name(module, name)
    except AttributeError:
        if default is _MISSING:
            raise
        return default
