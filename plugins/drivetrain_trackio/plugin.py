"""Registers the ``trackio`` tracker. Imports nothing of Trackio: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="1.0",
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
