"""Whether a CUDA device has float8 tensor cores."""

from __future__ import annotations

#: Compute capability of the first NVIDIA GPUs with float8 tensor cores (Ada Lovelace, Hopper).
FP8_COMPUTE_CAPABILITY = (8, 9)


def check_cuda_fp8_capability() -> bool:
    """Whether the current CUDA device can run float8 matmuls (compute capability 8.9 or newer)."""
    import torch

    if not torch.cuda.is_available():
        return False
    return tuple(torch.cuda.get_device_capability()) >= FP8_COMPUTE_CAPABILITY
