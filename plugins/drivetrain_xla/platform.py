"""The XLA platform object, on torch_xla's documented API (imported when it is chosen)."""

from __future__ import annotations

from typing import Any

import torch
import torch_xla
import torch_xla.core.xla_model as xm

from drivetrain.platform import Platform


class XlaPlatform(Platform):
    """PJRT devices (TPU cores, ...). Each process owns the device torch_xla gives it."""

    name = "xla"
    device_type = "xla"
    default_backend = "xla"

    def device_count(self) -> int:
        return torch_xla.device_count()

    def device_for(self, local_process_index: int) -> torch.device:
        return torch_xla.device()

    def synchronize(self) -> None:
        xm.mark_step()
        xm.wait_device_ops()

    def manual_seed_all(self, seed: int) -> None:
        xm.set_rng_state(seed)

    def get_rng_state(self) -> Any:
        return xm.get_rng_state()

    def set_rng_state(self, state: Any) -> None:
        xm.set_rng_state(state)

    def memory_allocated(self) -> int | None:
        info = xm.get_memory_info(self.device_for(0))
        if "bytes_used" in info:
            return int(info["bytes_used"])
        if "kb_total" in info and "kb_free" in info:
            return int(info["kb_total"] - info["kb_free"]) * 1024
        return None

    def supports_autocast(self, dtype: torch.dtype) -> bool:
        return dtype == torch.bfloat16


def init_process_group(timeout: Any) -> None:
    """Join the processes through torch_xla's own torch.distributed backend."""
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" backend)

    if dist.is_initialized():
        return
    kwargs = {"timeout": timeout} if timeout is not None else {}
    dist.init_process_group("xla", init_method="xla://", **kwargs)
