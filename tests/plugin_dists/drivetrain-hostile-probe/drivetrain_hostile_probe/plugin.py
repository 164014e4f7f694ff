"""A platform whose probe never returns, as one waiting on a driver that hangs would."""

import threading

from drivetrain.plugin_api import PlatformSpec, PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="a probe that never answers")


def probe():
    threading.Event().wait()


@hookimpl
def drivetrain_register_platforms():
    return [PlatformSpec(name="stuckaccel", factory="drivetrain.platform:Platform", priority=950, probe=probe)]
