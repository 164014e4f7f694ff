"""A feature (DRIVETRAIN_USE_HOSTILE=1) whose model wrapper raises inside ``prepare``."""

from drivetrain.plugin_api import PluginInfo, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="raises inside prepare", features=["hostile"])


@hookimpl
def drivetrain_wrap_model(model, run, evaluation_mode):
    raise OSError("the hostile wrapper lost its device")
