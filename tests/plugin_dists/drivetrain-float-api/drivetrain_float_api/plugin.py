"""Declares a PluginInfo with values of the wrong type."""

from drivetrain.plugin_api import PlatformSpec, PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version=1.5, description="a float for a version")


@hookimpl
def drivetrain_register_platforms():
    return [PlatformSpec(name="float_api", factory="drivetrain.platform:Platform", priority=1000)]
