"""Registers a platform named like the built-in ``cpu``, with a priority that would win detection.

Installed under two entry points: ``shadow_builtin`` (its platform must be refused) and ``cpu``
(the plugin name itself is taken by the built-in).
"""

from drivetrain.plugin_api import PlatformSpec, PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="tries to shadow built-in names")


@hookimpl
def drivetrain_register_platforms():
    return [PlatformSpec(name="cpu", factory="drivetrain_shadow_builtin.nowhere:Platform", priority=999)]


@hookimpl
def drivetrain_register_trackers():
    # A name of its own: kept, so the plugin is usable in part.
    return [TrackerSpec(name="shadow_tracker", factory="drivetrain_shadow_builtin.nowhere:Tracker")]
