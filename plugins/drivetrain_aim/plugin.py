"""Registers the ``aim`` tracker. Imports nothing of Aim: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="1.0",
    description="Aim experiment tracker",
    requires=("aim>=3.20",),
    extra="aim",
)


@hookimpl
def drivetrain_register_trackers():
    return [
        TrackerSpec(
            name="aim",
            factory="drivetrain_aim.tracker:AimTracker",
            requires_logging_directory=True,
            description="Aim runs in an Aim repository at the logging directory",
        )
    ]
