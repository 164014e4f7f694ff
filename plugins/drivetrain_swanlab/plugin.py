"""Registers the ``swanlab`` tracker. Imports nothing of SwanLab: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",
    description="SwanLab experiment tracker",
    requires=("swanlab>=0.5",),
    extra="swanlab",
)


@hookimpl
def drivetrain_register_trackers():
    return [
        TrackerSpec(
            name="swanlab",
            factory="drivetrain_swanlab.tracker:SwanLabTracker",
            requires_logging_directory=False,
            description="SwanLab runs (SWANLAB_MODE=offline or local keeps them on disk)",
        )
    ]


@hookimpl
def drivetrain_public_names():
    # Accelerate users import the tracker class from `accelerate.tracking` and probe the library
    return {"tracking.SwanLabTracker": "drivetrain_swanlab.tracker:SwanLabTracker",
            "utils.is_swanlab_available": "drivetrain_swanlab.plugin:is_swanlab_available"}


def is_swanlab_available() -> bool:
    """Whether the tracker's library is installed (imports nothing)."""
    from drivetrain.plugin_api import is_package_available

    return is_package_available("swanlab")
