"""``is_fp8_available``: can any fp8 backend train here."""

from __future__ import annotations


def is_fp8_available() -> bool:
    """Whether an fp8 backend's library is installed and the hardware runs it.

    A CUDA device needs compute capability 8.9 or newer for any backend; without one, torchao
    emulates float8 on the CPU.
    """
    from .capability import check_cuda_fp8_capability, is_torchao_available

    import importlib.util

    import torch

    libraries = is_torchao_available() or any(importlib.util.find_spec(name) is not None
                                              for name in ("transformer_engine", "msamp"))
    if not libraries:
        return False
    return check_cuda_fp8_capability() if torch.cuda.is_available() else is_torchao_available()
