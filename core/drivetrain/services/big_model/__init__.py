"""Models too big for one device: empty-weight init, device maps, offload, dispatch with
Accelerate's module hooks (``module_hooks.py``, once ``drivetrain.hooks``), weight loading,
and pipeline-parallel inference."""
