"""The XLA platform object, on torch_xla's documented API (imported when it is chosen).

torch_xla records operations lazily; nothing runs until the graph is cut (``sync``). The
platform cuts it where a step ends (the optimizer wrapper, the device loader) and before the
host reads a value (``synchronize``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

from drivetrain.plugin_api import Platform


def sync() -> None:
    """Cut the lazy graph here: compile it (once per distinct graph) and run it."""
    cut = getattr(torch_xla, "sync", None)  # torch_xla 2.6+; xm.mark_step before (deprecated since)
    if cut is not None:
        cut()
    else:  # pragma: no cover - older torch_xla
        xm.mark_step()


def runtime_started() -> bool:
    """Whether this process already opened its PJRT client (a TPU can be opened by one process only)."""
    return bool(torch_xla._XLAC._xla_runtime_is_initialized())


class XlaPlatform(Platform):
    """PJRT devices (TPU chips, the host CPU with ``PJRT_DEVICE=CPU``). Each process (or each
    thread of ``xmp.spawn`` on a TPU v2/v3) owns the device torch_xla gives it."""

    name = "xla"
    device_type = "xla"
    default_backend = "xla"

    def __init__(self) -> None:
        # Moving a module to an XLA device makes new Parameter objects (the CPU and XLA
        # tensors cannot share an implementation), so an optimizer built before `prepare`
        # would keep stepping the CPU copies. Swapping keeps each Parameter object and gives
        # it the device tensor: such optimizers follow the model.
        torch.__future__.set_swap_module_params_on_conversion(True)

    def is_initialized(self) -> bool:
        return runtime_started()

    def wrap_dataloader(self, dataloader: Any, device: torch.device) -> Any:
        from .loader import wrap_dataloader

        wrapped = wrap_dataloader(dataloader, device)
        return dataloader if wrapped is None else wrapped

    def clip_grad_norm(self, parameters: Any, max_norm: float, norm_type: float) -> torch.Tensor:
        from .optimizer import clip_grad_norm

        return clip_grad_norm(parameters, max_norm, norm_type)

    def device_count(self) -> int:
        # Counting through the runtime would open the devices in the launcher, and the
        # processes it starts could not open them again: count without it until it runs.
        if runtime_started():
            return int(xr.addressable_device_count())
        kind = (xr.device_type() or "").upper()
        if kind == "CPU":
            return int(os.environ.get("CPU_NUM_DEVICES", "1") or 1)
        if kind == "TPU":
            from torch_xla._internal import tpu

            return int(tpu.num_available_chips()) or 1
        return 1

    def device_for(self, local_process_index: int) -> torch.device:
        # torch_xla assigns the device of a process (or of a spawn thread) itself
        return torch_xla.device()

    def synchronize(self) -> None:
        sync()
        xm.wait_device_ops()

    def manual_seed_all(self, seed: int) -> None:
        xm.set_rng_state(int(seed))

    def get_rng_state(self) -> Any:
        return int(xm.get_rng_state())

    def set_rng_state(self, state: Any) -> None:
        xm.set_rng_state(int(state))

    def _memory(self) -> dict[str, Any]:
        try:
            return dict(xm.get_memory_info(torch_xla.device()))
        except (RuntimeError, ValueError):  # the CPU client keeps no memory statistics
            return {}

    def memory_allocated(self) -> int | None:
        info = self._memory()
        if "bytes_used" in info:
            return int(info["bytes_used"])
        return None

    def peak_memory(self) -> int | None:
        info = self._memory()
        return int(info["peak_bytes_used"]) if "peak_bytes_used" in info else None

    def free_memory(self, index: int) -> int | None:
        info = self._memory()
        if "bytes_limit" in info and "bytes_used" in info:
            return int(info["bytes_limit"]) - int(info["bytes_used"])
        return None

    def supports_autocast(self, dtype: torch.dtype) -> bool:
        return dtype == torch.bfloat16


def init_process_group(timeout: Any) -> None:
    """Join the processes through torch_xla's own torch.distributed backend (``xla://``)."""
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" backend)

    if dist.is_initialized():
        return
    kwargs = {"timeout": timeout} if timeout is not None else {}
    dist.init_process_group("xla", init_method="xla://", **kwargs)
