"""Stand-ins named by ``drivetrain_fallback_names``: each ``is_*`` probe answers ``False``."""

from __future__ import annotations

from typing import Any

from .catalogue import PROBES


def __getattr__(name: str) -> Any:
    if name in PROBES:
        from drivetrain.plugin_api import absent_probe

        return absent_probe(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
