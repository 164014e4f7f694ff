"""Implements a registration hook with an argument the spec does not have."""

from drivetrain.plugin_api import PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="wrong hook signature")


@hookimpl
def drivetrain_register_platforms(colour):
    return []
