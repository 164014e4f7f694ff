"""Registers the ``swanlab`` tracker. Imports nothing of SwanLab: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="1.0",
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
