"""``accelerate.utils.fsdp_utils``: every name comes from the plugin that owns the backend
(its keys ``"utils.fsdp_utils.<name>"``); without that plugin the module is empty."""

from __future__ import annotations

from ..kernel.contributed import surface_getattr

__getattr__ = surface_getattr(__name__)
