"""Registers the ``comet_ml`` tracker. Imports nothing of Comet: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",
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


@hookimpl
def drivetrain_public_names():
    # Accelerate users import the tracker class from `accelerate.tracking` and probe the library
    return {"tracking.CometMLTracker": "drivetrain_comet.tracker:CometMLTracker",
            "utils.is_comet_ml_available": "drivetrain_comet.plugin:is_comet_ml_available"}


def is_comet_ml_available() -> bool:
    """Whether the tracker's library is installed (imports nothing)."""
    from drivetrain.plugin_api import is_package_available

    return is_package_available("comet_ml")
