"""Registers the ``mlflow`` tracker. Imports nothing of MLflow: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="1.0",
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
