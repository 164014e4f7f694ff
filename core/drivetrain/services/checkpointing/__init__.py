"""Checkpoints that never lose a run: atomic directories, a manifest, code-free formats."""

from ...kernel.contributed import surface_getattr


# Accelerate's module functions, imported on first use (this package stays cheap to import)
__getattr__ = surface_getattr("drivetrain.checkpointing", lazy={
    "save_custom_state": f"{__name__}.custom_state:save_custom_state",
    "load_custom_state": f"{__name__}.custom_state:load_custom_state",
    "save_accelerator_state": f"{__name__}.accelerator_state:save_accelerator_state",
    "load_accelerator_state": f"{__name__}.accelerator_state:load_accelerator_state",
})
