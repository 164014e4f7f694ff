"""Prints to stdout while being imported and in its hooks."""

from drivetrain.plugin_api import EnvReportLine, PluginInfo, TrackerSpec, hookimpl

print("hostile_print: imported")

PLUGIN_INFO = PluginInfo(api_version="2.0", description="prints to stdout")


@hookimpl
def drivetrain_register_trackers():
    print("hostile_print: registering")
    return [TrackerSpec(name="loud", factory="drivetrain_hostile_print.plugin:PLUGIN_INFO")]


@hookimpl
def drivetrain_env_report():
    print("hostile_print: reporting")
    return [EnvReportLine("loud", "yes")]
