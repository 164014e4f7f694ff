"""The XPU platform object: one Intel GPU per process, through torch.xpu."""

from __future__ import annotations

from typing import Any

import torch

from drivetrain.plugin_api import Platform

from .backend import choose_backend


class XpuPlatform(Platform):
    """Intel GPUs. Process ``i`` of a machine uses ``xpu:(i % device_count)``."""

    name = "xpu"
    device_type = "xpu"

    @property
    def default_backend(self) -> str:  # type: ignore[override]
        # Decided when a group is made, not at import: it may import oneCCL's bindings.
        return choose_backend()

    def device_count(self) -> int:
        return torch.xpu.device_count()

    def device_for(self, local_process_index: int) -> torch.device:
        count = self.device_count()
        if count == 0:
            raise RuntimeError("the xpu platform was chosen but no Intel GPU is visible; check the driver and "
                               "ZE_AFFINITY_MASK, or run with --cpu")
        return torch.device("xpu", local_process_index % count)

    def set_device(self, device: torch.device) -> None:
        torch.xpu.set_device(device)

    def synchronize(self) -> None:
        torch.xpu.synchronize()

    def empty_cache(self) -> None:
        torch.xpu.empty_cache()

    def manual_seed_all(self, seed: int) -> None:
        torch.xpu.manual_seed_all(seed)

    def get_rng_state(self) -> Any:
        return torch.xpu.get_rng_state()

    def set_rng_state(self, state: Any) -> None:
        torch.xpu.set_rng_state(state)

    def memory_allocated(self) -> int | None:
        return torch.xpu.memory_allocated()

    def free_memory(self, index: int) -> int | None:
        return torch.xpu.mem_get_info(index)[0]

    def peak_memory(self) -> int | None:
        return torch.xpu.max_memory_allocated()

    def supports_autocast(self, dtype: torch.dtype) -> bool:
        if dtype == torch.bfloat16:
            return torch.xpu.is_bf16_supported()
        return dtype == torch.float16

    def is_initialized(self) -> bool:
        return torch.xpu.is_initialized()
