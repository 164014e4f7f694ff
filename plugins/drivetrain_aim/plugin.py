"""Registers the ``aim`` tracker. Imports nothing of Aim: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",
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


@hookimpl
def drivetrain_public_names():
    # Accelerate users import the tracker class from `accelerate.tracking` and probe the library
    return {"tracking.AimTracker": "drivetrain_aim.tracker:AimTracker",
            "utils.is_aim_available": "drivetrain_aim.plugin:is_aim_available"}


def is_aim_available() -> bool:
    """Whether the tracker's library is installed (imports nothing)."""
    from drivetrain.plugin_api import is_package_available

    return is_package_available("aim")
