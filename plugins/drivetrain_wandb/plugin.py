"""Registers the ``wandb`` tracker. Imports nothing of Weights & Biases: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="1.0",
    description="Weights & Biases experiment tracker",
    requires=("wandb>=0.17",),
    extra="wandb",
)


@hookimpl
def drivetrain_register_trackers():
    return [
        TrackerSpec(
            name="wandb",
            factory="drivetrain_wandb.tracker:WandBTracker",
            requires_logging_directory=False,
            description="Weights & Biases runs (WANDB_MODE=offline keeps them on disk)",
        )
    ]
