"""What the machine's NVIDIA driver says about its GPUs, asked through ``nvidia-smi`` so that
CUDA is not initialised (a launcher or a notebook can still fork its workers afterwards)."""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess

logger = logging.getLogger(__name__)

#: GPU families whose peer-to-peer and InfiniBand transfers hang NCCL with drivers older
#: than :data:`P2P_FIXED_DRIVER` (consumer cards after the RTX 3090).
P2P_UNSUPPORTED_FAMILIES = ("RTX 40",)
#: The first driver release that disables P2P on those cards itself.
P2P_FIXED_DRIVER = 550


def _query(field: str, index: int | None = None) -> list[str]:
    """One ``nvidia-smi --query-gpu`` field, a value per GPU (empty without the tool)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    command = [tool, f"--query-gpu={field}", "--format=csv,noheader"]
    if index is not None:
        command += ["-i", str(index)]
    try:
        output = subprocess.run(command, capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        logger.debug("nvidia-smi failed: %s", exc)
        return []
    return [line.strip() for line in output.splitlines() if line.strip()]


def get_gpu_info() -> tuple[list[str], int]:
    """The names of the machine's NVIDIA GPUs and their count, from the driver (no CUDA
    initialisation); ``([], 0)`` where ``nvidia-smi`` is missing or fails."""
    names = _query("name")
    return names, len(names)


def get_driver_version() -> str | None:
    """The NVIDIA driver version (``"550.54.15"``), or ``None`` where it cannot be read."""
    versions = _query("driver_version")
    return versions[0] if versions else None


def check_cuda_p2p_ib_support() -> bool:
    """Whether peer-to-peer and InfiniBand transfers can be trusted between this machine's GPUs.

    ``False`` for several consumer GPUs of a family whose P2P hangs NCCL (RTX 40 series) under
    a driver older than 550: set ``NCCL_P2P_DISABLE=1`` and ``NCCL_IB_DISABLE=1`` then.
    ``True`` otherwise, and whenever it cannot be told.
    """
    names, count = get_gpu_info()
    if count < 2 or not any(family in name for name in names for family in P2P_UNSUPPORTED_FAMILIES):
        return True
    driver = get_driver_version()
    try:
        major = int(driver.split(".")[0]) if driver else None
    except ValueError:
        major = None
    return major is None or major >= P2P_FIXED_DRIVER


def _bus_id(index: int) -> str | None:
    """The PCI address of GPU ``index`` as sysfs spells it (``0000:3b:00.0``)."""
    found = _query("pci.bus_id", index)
    if not found:
        return None
    domain, _, rest = found[0].lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def override_numa_affinity(local_process_index: int, verbose: bool | None = None) -> None:
    """Pin this process to the CPU cores of the NUMA node that GPU ``local_process_index`` is
    attached to (Linux; read from sysfs). Logs a warning and changes nothing where it cannot."""
    if verbose is None:
        verbose = os.environ.get("ACCELERATE_DEBUG_MODE", "").lower() in ("1", "true", "yes")
    from .platform import _parse_cpu_list  # the one parser of sysfs core lists (imports torch)

    bus_id = _bus_id(local_process_index)
    try:
        if bus_id is None:
            raise OSError("nvidia-smi gave no PCI address")
        with open(f"/sys/bus/pci/devices/{bus_id}/local_cpulist", encoding="ascii") as handle:
            cores = _parse_cpu_list(handle.read())
        os.sched_setaffinity(0, cores)
    except (AttributeError, OSError, ValueError) as exc:
        logger.warning("could not pin process %d to the cores of its GPU: %s", local_process_index, exc)
        return
    if verbose:
        logger.info("process %d pinned to cores %s (GPU %s)", local_process_index, sorted(cores), bus_id)


@functools.lru_cache(maxsize=None)
def set_numa_affinity(local_process_index: int, verbose: bool | None = None) -> None:
    """:func:`override_numa_affinity`, once per process and index (later calls do nothing)."""
    override_numa_affinity(local_process_index, verbose=verbose)
