"""Registers the ``tensorboard`` tracker. Imports nothing of TensorBoard: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="1.0",
    description="TensorBoard experiment tracker",
    requires=("tensorboard>=2.14",),
    extra="tensorboard",
)


@hookimpl
def drivetrain_register_trackers():
    return [
        TrackerSpec(
            name="tensorboard",
            factory="drivetrain_tensorboard.tracker:TensorBoardTracker",
            requires_logging_directory=True,
            description="TensorBoard event files under <logging_dir>/<project>",
        )
    ]
