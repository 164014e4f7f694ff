"""Registers the ``trackio`` tracker. Imports nothing of Trackio: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",
    description="Trackio experiment tracker",
    requires=("trackio>=0.8",),
    extra="trackio",
)


@hookimpl
def drivetrain_register_trackers():
    return [
        TrackerSpec(
            name="trackio",
            factory="drivetrain_trackio.tracker:TrackioTracker",
            requires_logging_directory=False,
            description="Trackio runs in its local database",
        )
    ]


@hookimpl
def drivetrain_public_names():
    # Accelerate users import the tracker class from `accelerate.tracking` and probe the library
    return {"tracking.TrackioTracker": "drivetrain_trackio.tracker:TrackioTracker",
            "utils.is_trackio_available": "drivetrain_trackio.plugin:is_trackio_available"}


def is_trackio_available() -> bool:
    """Whether the tracker's library is installed (imports nothing)."""
    from drivetrain.plugin_api import is_package_available

    return is_package_available("trackio")
