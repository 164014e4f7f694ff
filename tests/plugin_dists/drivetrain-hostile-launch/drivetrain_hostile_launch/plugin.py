"""A launcher whose applies() raises and a launch environment hook that raises."""

from drivetrain.plugin_api import LauncherSpec, PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="raises while a job is launched")


def applies(args):
    raise AttributeError("'Namespace' object has no attribute 'hostile_nodes'")


@hookimpl
def drivetrain_register_launchers():
    return [LauncherSpec(name="hostile", factory="drivetrain_hostile_launch.plugin:applies", priority=1000,
                         applies=applies)]


@hookimpl
def drivetrain_launch_environment(args):
    raise KeyError("HOSTILE_HOME")
