"""The stand-in for a vendor's device library: what a real plugin would import from its SDK.

A toyaccel "device" is this process computing on CPU tensors. What makes it a device of its
own is what a real accelerator's runtime answers:

- how many devices there are: ``TOYACCEL_DEVICES`` (unset or 0: no device, like a missing
  driver);
- how much memory each has: ``TOYACCEL_MEMORY`` (bytes, or ``"512MiB"``, ``"2GB"``), by
  default the 1 GiB the vendor declares for this model of device;
- a random generator of its own, separate from torch's CPU generator, as a GPU's is.

It imports nothing of drivetrain: a real SDK does not know about it either.
"""

from __future__ import annotations

import os
import re

import torch

DEVICES_VARIABLE = "TOYACCEL_DEVICES"
MEMORY_VARIABLE = "TOYACCEL_MEMORY"
#: The memory of one device when ``TOYACCEL_MEMORY`` does not say: the vendor's datasheet value.
DEFAULT_MEMORY = 2**30

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}

_generator: torch.Generator | None = None


class RuntimeConfigError(ValueError):
    """A ``TOYACCEL_*`` variable this runtime cannot read."""


def device_count() -> int:
    """Devices this machine has; 0 when ``TOYACCEL_DEVICES`` is unset."""
    text = os.environ.get(DEVICES_VARIABLE, "").strip()
    if not text:
        return 0
    if not text.isdigit():
        raise RuntimeConfigError(f"{DEVICES_VARIABLE}={text!r} is not a number of devices; set it to 0, 1, 2, ...")
    return int(text)


def memory_per_device() -> int:
    """Bytes of memory of each device."""
    text = os.environ.get(MEMORY_VARIABLE, "").strip()
    if not text:
        return DEFAULT_MEMORY
    match = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", text)
    if match is None or match.group(2).upper() not in _UNITS:
        raise RuntimeConfigError(f"{MEMORY_VARIABLE}={text!r} is not a size; write bytes or a size such as 512MiB")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def default_generator() -> torch.Generator:
    """This process's device generator (created on first use, as a runtime creates its own)."""
    global _generator
    if _generator is None:
        _generator = torch.Generator()
        _generator.seed()  # an unseeded device draws differently in every process
    return _generator


def randn(*size: int) -> torch.Tensor:
    """Normal samples drawn from the device generator (how user code sees the device's RNG)."""
    return torch.randn(*size, generator=default_generator())
