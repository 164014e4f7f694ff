"""Configuration dataclasses and enumerations (``accelerate.utils.dataclasses``).

The core's live in :mod:`drivetrain.kwargs_handlers` and :mod:`drivetrain.enums`; a backend's
(``DeepSpeedPlugin``, ``DistributedDataParallelKwargs``) come from its plugin.
"""

from __future__ import annotations

from typing import Any

from ..selection.enums import (
    ComputeEnvironment,
    CustomDtype,
    DistributedType,
    DynamoBackend,
    LoggerType,
    PrecisionType,
    RNGType,
    SageMakerDistributedType,
)
from ..runtime.kwargs_handlers import (
    AutocastKwargs,
    DataLoaderConfiguration,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    MonitorKwargs,
    ProfileKwargs,
    ProjectConfiguration,
    TorchDynamoPlugin,
)
from ..kernel.contributed import surface_getattr
from ..tensors.nested import TensorInformation
from ..services.other import get_module_class_from_name

__all__ = [
    "AutocastKwargs", "ComputeEnvironment", "CustomDtype", "DataLoaderConfiguration", "DistributedType",
    "DynamoBackend", "GradientAccumulationPlugin", "GradScalerKwargs", "InitProcessGroupKwargs", "KwargsHandler",
    "LoggerType", "MonitorKwargs", "PrecisionType", "ProfileKwargs", "ProjectConfiguration", "RNGType", "SageMakerDistributedType",
    "TensorInformation", "TorchDynamoPlugin", "get_module_class_from_name",
]


# a plugin's dataclass (``DeepSpeedPlugin``) lives where Accelerate users import it from
__getattr__ = surface_getattr(__name__, also=("utils", ""))
