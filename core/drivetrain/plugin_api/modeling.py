"""Model helpers a plugin reuses: device maps, dispatch, checkpoint loading, block detection
(imports torch)."""

from ..services.big_model.dispatch import dispatch_model
from ..services.big_model.device_map import resolve_device_map
from ..services.big_model.modeling import resolve_device
from ..services.other import _repeated_blocks as repeated_blocks
from ..services.big_model.weights_loading import load_checkpoint_in_model

__all__ = ["dispatch_model", "load_checkpoint_in_model", "repeated_blocks", "resolve_device", "resolve_device_map"]
