"""Which torch.distributed backend connects XPU processes: XCCL (in torch 2.8+) or oneCCL's
bindings (``oneccl_bindings_for_pytorch``, which register ``ccl`` when imported)."""

from __future__ import annotations

import importlib.util

from drivetrain.plugin_api import is_torch_version

#: Accelerate's constant: the torch version whose profiler records XPU activity.
XPU_PROFILING_AVAILABLE_PYTORCH_VERSION = "2.4.0"

#: The first torch release with the XCCL backend built in.
XCCL_TORCH_VERSION = "2.8.0"

CCL_BINDINGS = "oneccl_bindings_for_pytorch"


def is_xccl_available() -> bool:
    """Whether this torch (2.8 or newer) was built with the XCCL backend."""
    if not is_torch_version(">=", XCCL_TORCH_VERSION):
        return False
    import torch.distributed as dist

    check = getattr(dist, "is_xccl_available", None)
    return bool(check is not None and dist.is_available() and check())


def is_ccl_available() -> bool:
    """Whether oneCCL's torch bindings are installed (they add the ``ccl`` backend)."""
    return importlib.util.find_spec(CCL_BINDINGS) is not None


def choose_backend() -> str:
    """``"xccl"`` where torch has it, else ``"ccl"`` (importing the bindings registers it).

    Raises:
        DistributedError: neither is installed.
    """
    if is_xccl_available():
        return "xccl"
    if is_ccl_available():
        importlib.import_module(CCL_BINDINGS)
        return "ccl"
    from drivetrain.plugin_api import DistributedError

    raise DistributedError("XPU processes need a collective backend: torch 2.8+ built with XCCL, or oneCCL's "
                           "bindings (pip install oneccl_bind_pt); or run one process")
