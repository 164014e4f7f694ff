"""Reading and writing a plugin's part of a checkpoint through the core's safe path (imports torch).

Nothing read from disk runs code: ``safe_torch_load`` is the only way a plugin reads a pickle
(``torch.load(weights_only=True)`` with an explicit allow-list); model weights go through
``write_model_files``/``read_model_files`` (safetensors, the ecosystem's layout), other
nested state through ``save_tree``/``load_tree`` (safetensors and JSON, no pickle).
"""

from ..services.checkpointing.compatibility import check_optimizer
from ..services.checkpointing.deferred import DeferredWrites, copy_to_host
from ..services.checkpointing.model_files import read_model_files, write_model_files
from ..services.checkpointing.output_dir import output_write_error, refuse_unusable_output
from ..services.checkpointing.safe_load import safe_torch_load
from ..services.checkpointing.tree_io import load_tree, save_tree

__all__ = ["DeferredWrites", "check_optimizer", "copy_to_host", "load_tree", "output_write_error", "read_model_files",
           "refuse_unusable_output", "safe_torch_load", "save_tree", "write_model_files"]
