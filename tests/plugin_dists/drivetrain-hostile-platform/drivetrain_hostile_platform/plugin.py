"""A platform that is detected but whose constructor raises, as one whose driver is broken would."""

from drivetrain.plugin_api import PlatformSpec, PluginInfo, Probe, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="a platform that cannot start")


class BrokenPlatform:
    def __init__(self):
        raise OSError("device /dev/brokenaccel0 is not responding")


@hookimpl
def drivetrain_register_platforms():
    return [PlatformSpec(name="brokenaccel", factory="drivetrain_hostile_platform.plugin:BrokenPlatform",
                         priority=900, probe=lambda: Probe(True, "a brokenaccel device"))]
