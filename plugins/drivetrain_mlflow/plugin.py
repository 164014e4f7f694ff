"""Registers the ``mlflow`` tracker. Imports nothing of MLflow: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",
    description="MLflow experiment tracker",
    requires=("mlflow>=2.10",),
    extra="mlflow",
)


@hookimpl
def drivetrain_register_trackers():
    return [
        TrackerSpec(
            name="mlflow",
            factory="drivetrain_mlflow.tracker:MLflowTracker",
            requires_logging_directory=False,
            description="MLflow runs (a SQLite store under the logging directory unless a tracking URI is set)",
        )
    ]


@hookimpl
def drivetrain_public_names():
    # Accelerate users import the tracker class from `accelerate.tracking` and probe the library
    return {"tracking.MLflowTracker": "drivetrain_mlflow.tracker:MLflowTracker",
            "utils.is_mlflow_available": "drivetrain_mlflow.plugin:is_mlflow_available"}


def is_mlflow_available() -> bool:
    """Whether the tracker's library is installed (imports nothing)."""
    from drivetrain.plugin_api import is_package_available

    return is_package_available("mlflow")
