"""Model helpers a plugin reuses: device maps, dispatch, checkpoint loading, block detection
(imports torch)."""

from ..big_modeling import dispatch_model
from ..utils.device_map import resolve_device_map
from ..utils.modeling import resolve_device
from ..utils.other import _repeated_blocks as repeated_blocks
from ..utils.weights_loading import load_checkpoint_in_model

__all__ = ["dispatch_model", "load_checkpoint_in_model", "repeated_blocks", "resolve_device", "resolve_device_map"]
