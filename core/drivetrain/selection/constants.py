"""File names and launcher parameters Accelerate users refer to (``accelerate.utils.constants``).

The names are those of Accelerate's checkpoint layout, which the ecosystem (and drivetrain's
``save_model``) uses for model weights.
"""

from __future__ import annotations

from ..kernel.contributed import surface_getattr

MODEL_NAME = "pytorch_model"
SAFE_MODEL_NAME = "model"
RNG_STATE_NAME = "random_states"
OPTIMIZER_NAME = "optimizer"
SCHEDULER_NAME = "scheduler"
SAMPLER_NAME = "sampler"
SCALER_NAME = "scaler.pt"
PROFILE_PATTERN_NAME = "profile_{suffix}.json"
WEIGHTS_NAME = f"{MODEL_NAME}.bin"
WEIGHTS_PATTERN_NAME = "pytorch_model{suffix}.bin"
WEIGHTS_INDEX_NAME = f"{WEIGHTS_NAME}.index.json"
SAFE_WEIGHTS_NAME = f"{SAFE_MODEL_NAME}.safetensors"
SAFE_WEIGHTS_PATTERN_NAME = "model{suffix}.safetensors"
SAFE_WEIGHTS_INDEX_NAME = f"{SAFE_WEIGHTS_NAME}.index.json"

#: The torch version from which the profiler records the device timeline of every platform.
MITA_PROFILING_AVAILABLE_PYTORCH_VERSION = "2.1.0"

#: Options of ``torchrun`` that ``drivetrain launch`` passes through to it.
TORCH_LAUNCH_PARAMS = [
    "nnodes", "nproc_per_node", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "rdzv_conf", "standalone",
    "max_restarts", "monitor_interval", "start_method", "role", "module", "m", "no_python", "run_path",
    "log_dir", "r", "redirects", "t", "tee", "node_rank", "master_addr", "master_port",
]

STR_OPERATION_TO_FUNC_NAMES = (">", ">=", "==", "!=", "<=", "<")


def supported_layers_for_upcasting() -> tuple[type, ...]:
    """The layer classes whose weights ``attach_layerwise_casting_hooks`` stores in a low dtype:
    convolutions and linear layers, whose weights only multiply the input. Other layers (norms,
    embeddings) keep their dtype. Built on first use, so importing this module needs no torch."""
    from torch import nn

    return (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d, nn.Linear)


def _distributed_operation_types() -> list[str]:
    from .enums import DistributedType

    return [member.value for member in DistributedType if member.value.startswith("MULTI_")]


# The multi-process distributed types come from the installed platforms and strategies, so
# the list is built when asked for, not written here; then a plugin's "utils.constants.<name>".
__getattr__ = surface_getattr("drivetrain.utils.constants", computed={
    "TORCH_DISTRIBUTED_OPERATION_TYPES": _distributed_operation_types,
    "SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING": lambda: supported_layers_for_upcasting(),
})


