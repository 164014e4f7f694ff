"""The platform object drivetrain drives: the factory its ``PlatformSpec`` names.

Imported only when a run chooses toyaccel (never at plugin discovery), so it may import torch
and the vendor's runtime freely.
"""

from __future__ import annotations

from typing import Any

import torch
from drivetrain.plugin_api.errors import ConfigError
from drivetrain.plugin_api.platform import Platform

from . import runtime
from .collectives import BACKEND, register_backend


class ToyAccelPlatform(Platform):
    """toyaccel devices: each process drives one, computing on CPU tensors."""

    name = "toyaccel"
    # The torch device type of its tensors. A real accelerator has its own ("cuda", "xpu");
    # this one's tensors are CPU tensors, which is what lets it run anywhere.
    device_type = "cpu"
    default_backend = BACKEND

    def __init__(self) -> None:
        # Processes are connected after the platform is built, by the torch_distributed
        # plugin with this platform's default_backend: the name must be known by then.
        register_backend()

    def device_count(self) -> int:
        try:
            return runtime.device_count()
        except runtime.RuntimeConfigError as exc:  # drivetrain reports its own error types
            raise ConfigError(str(exc)) from None

    def device_for(self, local_process_index: int) -> torch.device:
        if self.device_count() == 0:
            raise ConfigError(f"the toyaccel platform was chosen but no device is present; set "
                              f"{runtime.DEVICES_VARIABLE}=N or choose another platform (--cpu)")
        return torch.device(self.device_type)

    def manual_seed_all(self, seed: int) -> None:
        runtime.default_generator().manual_seed(seed)

    def get_rng_state(self) -> Any:
        return runtime.default_generator().get_state()

    def set_rng_state(self, state: Any) -> None:
        runtime.default_generator().set_state(torch.as_tensor(state, dtype=torch.uint8).cpu())

    def free_memory(self, index: int) -> int | None:
        if not 0 <= index < self.device_count():
            raise ConfigError(f"toyaccel device {index} does not exist ({self.device_count()} present); "
                              "name a device below the count")
        try:
            return runtime.memory_per_device()
        except runtime.RuntimeConfigError as exc:
            raise ConfigError(str(exc)) from None

    def supports_autocast(self, dtype: torch.dtype) -> bool:
        return dtype == torch.bfloat16
