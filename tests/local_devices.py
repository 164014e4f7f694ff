"""The accelerator this machine has, read from torch itself.

Detection must pick it here, so a test that checks what detection chose compares with this
instead of assuming the CPU: the suite passes on a CPU-only machine and on a GPU machine alike.
"""

from __future__ import annotations

import torch


def local_accelerator() -> str:
    """The platform name detection picks on this machine with the built-in plugins
    (highest priority first: cuda, xpu, mps), or ``"cpu"``."""
    if torch.cuda.is_available():
        return "cuda"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return "xpu"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def local_device_count() -> int:
    """How many devices of :func:`local_accelerator` there are (1 for the CPU)."""
    name = local_accelerator()
    return 1 if name == "cpu" else getattr(torch, name).device_count()
