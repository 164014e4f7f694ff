"""Registers the ``dvclive`` tracker. Imports nothing of DVCLive: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",
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


@hookimpl
def drivetrain_public_names():
    # Accelerate users import the tracker class from `accelerate.tracking` and probe the library
    return {"tracking.DVCLiveTracker": "drivetrain_dvclive.tracker:DVCLiveTracker",
            "utils.is_dvclive_available": "drivetrain_dvclive.plugin:is_dvclive_available"}


def is_dvclive_available() -> bool:
    """Whether the tracker's library is installed (imports nothing)."""
    from drivetrain.plugin_api import is_package_available

    return is_package_available("dvclive")
