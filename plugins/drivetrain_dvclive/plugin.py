"""Registers the ``dvclive`` tracker. Imports nothing of DVCLive: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="1.0",
    description="DVCLive experiment tracker",
    requires=("dvclive>=3.40",),
    extra="dvclive",
)


@hookimpl
def drivetrain_register_trackers():
    return [
        TrackerSpec(
            name="dvclive",
            factory="drivetrain_dvclive.tracker:DVCLiveTracker",
            requires_logging_directory=False,
            description="DVCLive metrics, params and plots files",
        )
    ]
