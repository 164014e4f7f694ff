"""``accelerate.utils.ao``: Accelerate's names of that module, each contributed by the plugin that
owns the backend (its keys ``"utils.ao.<name>"``); the same objects as ``drivetrain.utils`` serves.
Without that plugin the module is empty."""

from __future__ import annotations

from ..kernel.contributed import surface_getattr

__getattr__ = surface_getattr(__name__)
