"""Registers the ``tensorboard`` tracker. Imports nothing of TensorBoard: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",
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


@hookimpl
def drivetrain_public_names():
    # Accelerate users import the tracker class from `accelerate.tracking` and probe the library
    return {"tracking.TensorBoardTracker": "drivetrain_tensorboard.tracker:TensorBoardTracker",
            "utils.is_tensorboard_available": "drivetrain_tensorboard.plugin:is_tensorboard_available"}


def is_tensorboard_available() -> bool:
    """Whether the tracker's library is installed (imports nothing)."""
    from drivetrain.plugin_api import is_package_available

    return is_package_available("tensorboard") or is_package_available("tensorboardX")
