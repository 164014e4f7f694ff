"""A registration hook that returns things that are not descriptors."""

from drivetrain.plugin_api import PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="returns junk from a registration hook")


@hookimpl
def drivetrain_register_trackers():
    return ["not a spec", 42]
