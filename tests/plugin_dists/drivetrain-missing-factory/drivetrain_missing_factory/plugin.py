"""Registers a tracker whose class lives in a module that is not installed."""

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="a tracker that cannot be imported")


@hookimpl
def drivetrain_register_trackers():
    return [TrackerSpec(name="ghost", factory="drivetrain_missing_factory_gone.tracker:GhostTracker")]
