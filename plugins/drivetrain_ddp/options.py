"""User options of the ddp strategy, with Accelerate's names."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from drivetrain.plugin_api import KwargsHandler


class DDPCommunicationHookType(str, Enum):
    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"

    def __str__(self) -> str:  # Accelerate's BaseEnum: the value
        return self.value


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Arguments of ``DistributedDataParallel`` plus a gradient communication hook.

    ``comm_hook`` compresses gradients before the all-reduce (fp16/bf16) or uses PowerSGD;
    ``comm_wrapper`` wraps PowerSGD with fp16/bf16 compression; ``comm_state_option`` passes
    options to the PowerSGD state (``matrix_approximation_rank``, ...).
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, ignore_keys=("comm_hook", "comm_wrapper", "comm_state_option")) -> dict[str, Any]:
        return {key: value for key, value in super().to_dict().items() if key not in ignore_keys}
