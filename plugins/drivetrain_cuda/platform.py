"""The CUDA platform object: one GPU per process, chosen by the local rank."""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from drivetrain.plugin_api.environment import parse_bool, read_pair
from drivetrain.plugin_api import Platform

logger = logging.getLogger(__name__)


class CudaPlatform(Platform):
    """NVIDIA GPUs. Process ``i`` of a machine uses ``cuda:(i % device_count)``."""

    name = "cuda"
    device_type = "cuda"
    default_backend = "nccl"

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def device_for(self, local_process_index: int) -> torch.device:
        count = self.device_count()
        if count == 0:
            raise RuntimeError("the cuda platform was chosen but no CUDA device is visible; check the driver "
                               "and CUDA_VISIBLE_DEVICES, or run with --cpu")
        return torch.device("cuda", local_process_index % count)

    def set_device(self, device: torch.device) -> None:
        torch.cuda.set_device(device)
        if parse_bool(read_pair("DRIVETRAIN_CPU_AFFINITY", "ACCELERATE_CPU_AFFINITY", default="0")):
            pin_to_nearest_cores(device)

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()

    def manual_seed_all(self, seed: int) -> None:
        torch.cuda.manual_seed_all(seed)

    def get_rng_state(self) -> Any:
        return torch.cuda.get_rng_state()

    def set_rng_state(self, state: Any) -> None:
        torch.cuda.set_rng_state(state)

    def memory_allocated(self) -> int | None:
        return torch.cuda.memory_allocated()

    def free_memory(self, index: int) -> int | None:
        return torch.cuda.mem_get_info(index)[0]

    def peak_memory(self) -> int | None:
        return torch.cuda.max_memory_allocated()

    def peak_flops(self, precision: str) -> float | None:
        from .peak_flops import peak_flops

        # fp32 matrix products run on TF32 units when torch is allowed to use them
        tf32 = precision == "no" and torch.get_float32_matmul_precision() != "highest"
        return peak_flops(torch.cuda.get_device_name(), "tf32" if tf32 else precision)

    def supports_autocast(self, dtype: torch.dtype) -> bool:
        if dtype == torch.bfloat16:
            return torch.cuda.is_bf16_supported()
        return dtype == torch.float16

    def is_initialized(self) -> bool:
        """Whether CUDA is already initialised in this process (a forked child could not use it)."""
        return torch.cuda.is_initialized()


def pin_to_nearest_cores(device: torch.device) -> None:
    """Restrict this process to the CPU cores attached to ``device``'s NUMA node (Linux)."""
    try:
        props = torch.cuda.get_device_properties(device)
        bus_id = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        with open(f"/sys/bus/pci/devices/{bus_id}/local_cpulist", encoding="ascii") as handle:
            cores = _parse_cpu_list(handle.read())
        os.sched_setaffinity(0, cores)
        logger.debug("pinned to cores %s, next to %s", sorted(cores), device)
    except (AttributeError, OSError, ValueError) as exc:
        logger.warning("could not pin this process to the cores of %s: %s", device, exc)


def _parse_cpu_list(text: str) -> set[int]:
    """``"0-3,8-11"`` -> ``{0, 1, 2, 3, 8, 9, 10, 11}``."""
    cores: set[int] = set()
    for part in filter(None, (p.strip() for p in text.strip().split(","))):
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return cores
