"""Helpers users import from ``drivetrain.utils`` (Accelerate's ``accelerate.utils``).

Operations on nested tensors and across processes live in :mod:`.operations`, seeding and
random-generator synchronisation in :mod:`.random`; the enumerations and configuration
dataclasses are re-exported from where the core defines them.
"""

from __future__ import annotations

from ..enums import ComputeEnvironment, DistributedType, DynamoBackend, LoggerType, PrecisionType, RNGType
from ..kwargs_handlers import (
    AutocastKwargs,
    DataLoaderConfiguration,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    ProfileKwargs,
    ProjectConfiguration,
    TorchDynamoPlugin,
)
from .operations import (
    ConvertOutputsToFp32,
    DistributedOperationException,
    TensorInformation,
    broadcast,
    broadcast_object_list,
    chained_operation,
    concatenate,
    convert_outputs_to_fp32,
    convert_to_fp32,
    copy_tensor_to_devices,
    find_batch_size,
    find_device,
    gather,
    gather_for_metrics,
    gather_object,
    get_data_structure,
    get_shape,
    honor_type,
    ignorant_find_batch_size,
    initialize_tensors,
    is_namedtuple,
    is_tensor_information,
    is_torch_tensor,
    listify,
    pad_across_processes,
    pad_input_tensors,
    recursively_apply,
    reduce,
    send_to_device,
    slice_tensors,
    verify_operation,
    wait_for_everyone,
)
from .random import set_seed, synchronize_rng_state, synchronize_rng_states

__all__ = [
    # enums and configuration
    "ComputeEnvironment", "DistributedType", "DynamoBackend", "LoggerType", "PrecisionType", "RNGType",
    "AutocastKwargs", "DataLoaderConfiguration", "GradientAccumulationPlugin", "GradScalerKwargs",
    "InitProcessGroupKwargs", "KwargsHandler", "ProfileKwargs", "ProjectConfiguration", "TorchDynamoPlugin",
    # operations
    "ConvertOutputsToFp32", "DistributedOperationException", "TensorInformation", "broadcast",
    "broadcast_object_list", "chained_operation", "concatenate", "convert_outputs_to_fp32", "convert_to_fp32",
    "copy_tensor_to_devices", "find_batch_size", "find_device", "gather", "gather_for_metrics", "gather_object",
    "get_data_structure", "get_shape", "honor_type", "ignorant_find_batch_size", "initialize_tensors",
    "is_namedtuple", "is_tensor_information", "is_torch_tensor", "listify", "pad_across_processes",
    "pad_input_tensors", "recursively_apply", "reduce", "send_to_device", "slice_tensors", "verify_operation",
    "wait_for_everyone",
    # random
    "set_seed", "synchronize_rng_state", "synchronize_rng_states",
]


def __getattr__(name: str):
    """Everything else users import from ``accelerate.utils``: the core's public names
    (``find_executable_batch_size``, ``ProjectConfiguration`` ...) and those plugins contribute
    (``DeepSpeedPlugin``, ``FullyShardedDataParallelPlugin``, ``DistributedDataParallelKwargs``)."""
    import drivetrain

    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(drivetrain, name)
    except AttributeError:
        raise AttributeError(f"module 'drivetrain.utils' has no attribute {name!r}") from None
