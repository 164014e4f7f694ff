"""Written for a plugin API this drivetrain does not offer yet."""

from drivetrain.plugin_api import PlatformSpec, PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="3.0", description="from the future")


@hookimpl
def drivetrain_register_platforms():
    return [PlatformSpec(name="future", factory="drivetrain.platform:Platform", priority=1000)]
