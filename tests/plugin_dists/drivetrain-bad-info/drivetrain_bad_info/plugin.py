"""Declares a PluginInfo with values of the wrong type."""

from drivetrain.plugin_api import PlatformSpec, PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", requires="torch", features=[3], description="requires is a string")


@hookimpl
def drivetrain_register_platforms():
    return [PlatformSpec(name="bad_info", factory="drivetrain.platform:Platform", priority=1000)]
