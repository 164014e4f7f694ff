"""Names users import from ``drivetrain`` that a plugin contributes (``DeepSpeedPlugin``)."""

from __future__ import annotations

from .plugin_manager import get_plugin_manager


def all_plugin_public_names() -> dict[str, str]:
    """Every contributed name and its lazy reference; the first plugin loaded wins a clash."""
    names: dict[str, str] = {}
    for _plugin, (name, ref) in get_plugin_manager().registrations("drivetrain_public_names"):
        names.setdefault(name, ref)
    return names


def plugin_public_name(name: str) -> str | None:
    return all_plugin_public_names().get(name)
