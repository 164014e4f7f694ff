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
from ..tensors.nested import TensorInformation
from ..services.other import get_module_class_from_name

__all__ = [
    "AutocastKwargs", "ComputeEnvironment", "CustomDtype", "DataLoaderConfiguration", "DistributedType",
    "DynamoBackend", "GradientAccumulationPlugin", "GradScalerKwargs", "InitProcessGroupKwargs", "KwargsHandler",
    "LoggerType", "MonitorKwargs", "PrecisionType", "ProfileKwargs", "ProjectConfiguration", "RNGType", "SageMakerDistributedType",
    "TensorInformation", "TorchDynamoPlugin", "get_module_class_from_name",
]


def __getattr__(name: str) -> Any:
    # a plugin's dataclass (``DeepSpeedPlugin``) lives where Accelerate users import it from
    from ..kernel.contributed import resolve_module_name

    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return resolve_module_name("utils.dataclasses", name)
    except AttributeError:
        pass
    try:
        return resolve_module_name("utils", name, also_top_level=True)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
