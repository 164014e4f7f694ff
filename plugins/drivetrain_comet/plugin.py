"""Registers the ``comet_ml`` tracker. Imports nothing of Comet: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="1.0",
    description="Comet experiment tracker",
    requires=("comet-ml>=3.41",),
    extra="comet",
)


@hookimpl
def drivetrain_register_trackers():
    return [
        TrackerSpec(
            name="comet_ml",
            factory="drivetrain_comet.tracker:CometMLTracker",
            requires_logging_directory=False,
            description="Comet experiments (offline archives under the logging directory)",
        )
    ]
