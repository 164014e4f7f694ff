"""The MPS platform object: the one Apple silicon GPU of the machine, through torch.mps."""

from __future__ import annotations

from typing import Any

import torch

from drivetrain.plugin_api import Platform

from .support import bf16_supported


class MpsPlatform(Platform):
    """Apple's Metal Performance Shaders device. A Mac has one; a run has one process."""

    name = "mps"
    device_type = "mps"
    # No torch.distributed backend moves MPS tensors; the platform connects no processes
    # (selection refuses several before they start), so this is never used for a group.
    default_backend = "gloo"

    def device_count(self) -> int:
        return 1 if torch.backends.mps.is_available() else 0

    def device_for(self, local_process_index: int) -> torch.device:
        if not torch.backends.mps.is_available():
            raise RuntimeError("the mps platform was chosen but MPS is not available; it needs macOS 12.3+ on "
                               "Apple silicon and a torch build with MPS, or run with --cpu")
        return torch.device("mps")

    def synchronize(self) -> None:
        torch.mps.synchronize()

    def empty_cache(self) -> None:
        torch.mps.empty_cache()

    def manual_seed_all(self, seed: int) -> None:
        torch.mps.manual_seed(seed)

    def get_rng_state(self) -> Any:
        return torch.mps.get_rng_state()

    def set_rng_state(self, state: Any) -> None:
        torch.mps.set_rng_state(state)

    def memory_allocated(self) -> int | None:
        return torch.mps.current_allocated_memory()

    def peak_memory(self) -> int | None:
        return None  # Metal keeps no peak, and the process's resident set leaves its buffers out

    def free_memory(self, index: int) -> int | None:
        # Unified memory: what Metal recommends the process keep its working set under, less
        # what this process already holds on the device.
        return max(0, torch.mps.recommended_max_memory() - torch.mps.current_allocated_memory())

    def supports_autocast(self, dtype: torch.dtype) -> bool:
        if dtype == torch.bfloat16:
            return bf16_supported()
        return dtype == torch.float16
