"""Registers the ``wandb`` tracker. Imports nothing of Weights & Biases: the tracker class is named lazily."""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, TrackerSpec, hookimpl

PLUGIN_INFO = PluginInfo(
    api_version="2.0",
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


@hookimpl
def drivetrain_public_names():
    # Accelerate users import the tracker class from `accelerate.tracking` and probe the library
    return {"tracking.WandBTracker": "drivetrain_wandb.tracker:WandBTracker",
            "utils.is_wandb_available": "drivetrain_wandb.plugin:is_wandb_available"}


def is_wandb_available() -> bool:
    """Whether the tracker's library is installed (imports nothing)."""
    from drivetrain.plugin_api import is_package_available

    return is_package_available("wandb")
