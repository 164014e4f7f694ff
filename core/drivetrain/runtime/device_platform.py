"""The device platform a run uses: what a platform plugin's factory returns.

The core talks to devices only through this interface, so it never names one.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch


class Platform:
    """A kind of device. Subclasses override what differs from the CPU defaults below.

    Attributes:
        name: the platform's name (``"cpu"``), as in its ``PlatformSpec``.
        device_type: the ``torch.device`` type of its devices (``"cpu"``, ``"cuda"``).
        default_backend: the torch.distributed backend used when the user names none.
    """

    name = "cpu"
    device_type = "cpu"
    default_backend = "gloo"

    def is_initialized(self) -> bool:
        """Whether this process already started the device runtime (a forked child could not use it)."""
        return False

    def device_count(self) -> int:
        """How many devices of this kind this machine has."""
        return 1

    def device_for(self, local_process_index: int) -> torch.device:
        """The device a process with this local rank uses."""
        return torch.device(self.device_type)

    def set_device(self, device: torch.device) -> None:
        """Make ``device`` this process's current device."""

    def synchronize(self) -> None:
        """Wait for all queued work on the current device."""

    def empty_cache(self) -> None:
        """Return cached memory to the device's allocator."""

    def manual_seed_all(self, seed: int) -> None:
        """Seed every device generator of this platform (the CPU one is seeded by the core)."""

    def get_rng_state(self) -> Any:
        """This process's device RNG state, or ``None`` when the platform has no own generator."""
        return None

    def set_rng_state(self, state: Any) -> None:
        """Restore what :meth:`get_rng_state` returned."""

    def memory_allocated(self) -> int | None:
        """Bytes currently allocated on the current device, when the platform can tell."""
        return None

    def peak_memory(self) -> int | None:
        """The most bytes this process has held on its device so far (``MonitorKwargs``'s
        ``memory/peak_bytes``); for the CPU, the process's peak resident set."""
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # Linux counts KiB, macOS bytes

    def peak_flops(self, precision: str) -> float | None:
        """The device's dense peak FLOP/s for matrix products in ``precision`` (``"no"`` for
        fp32, ``"bf16"``, ``"fp16"``, ``"fp8"``), which MFU is measured against; ``None`` when
        unknown (the CPU's: its peak depends on cores, clocks and vector units)."""
        return None

    def free_memory(self, index: int) -> int | None:
        """Bytes free on device ``index`` of this platform, for device maps
        (``get_max_memory``); ``None`` when its devices are the host's memory (the CPU)."""
        return None

    def clip_grad_norm(self, parameters: Sequence[torch.Tensor], max_norm: float,
                       norm_type: float) -> torch.Tensor | None:
        """Clip the gradients' total norm the platform's way (replicas that average their
        gradients in the step average them first); ``None``: torch's clipping is right here.
        A strategy with gradients of its own (sharded, in an engine) clips before asking."""
        return None

    def wrap_dataloader(self, dataloader: Any, device: torch.device) -> Any:
        """The prepared data loader as ``device`` (this process's) reads it: a loader that
        copies batches to the device ahead in the platform's own way; the loader itself by default."""
        return dataloader

    def supports_autocast(self, dtype: torch.dtype) -> bool:
        """Whether ``torch.autocast(self.device_type, dtype)`` works here."""
        return dtype in (torch.bfloat16, torch.float16)
