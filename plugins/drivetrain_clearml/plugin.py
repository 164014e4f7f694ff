"""Registers the ``clearml`` tracker. Imports nothing of ClearML: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",
    description="ClearML experiment tracker",
    requires=("clearml>=1.14",),
    extra="clearml",
)


@hookimpl
def drivetrain_register_trackers():
    return [
        TrackerSpec(
            name="clearml",
            factory="drivetrain_clearml.tracker:ClearMLTracker",
            requires_logging_directory=False,
            description="ClearML tasks (CLEARML_OFFLINE_MODE=1 keeps them on disk)",
        )
    ]


@hookimpl
def drivetrain_public_names():
    # Accelerate users import the tracker class from `accelerate.tracking` and probe the library
    return {"tracking.ClearMLTracker": "drivetrain_clearml.tracker:ClearMLTracker",
            "utils.is_clearml_available": "drivetrain_clearml.plugin:is_clearml_available"}


def is_clearml_available() -> bool:
    """Whether the tracker's library is installed (imports nothing)."""
    from drivetrain.plugin_api import is_package_available

    return is_package_available("clearml")
