"""``toyccl``: the vendor's collectives backend, registered with torch.distributed.

A real vendor ships a compiled ``ProcessGroup`` backend (as HCCL or CCL are); this one builds
gloo's underneath. What matters to drivetrain is the same: a backend *name* that
``torch.distributed.init_process_group(backend="toyccl")`` accepts, so the platform can name
it as its default and the ``torch_distributed`` plugin connects processes through it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

BACKEND = "toyccl"


def _create(store: Any, rank: int, world_size: int, timeout: timedelta) -> Any:
    import torch.distributed as dist

    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


def register_backend() -> None:
    """Make ``toyccl`` a torch.distributed backend in this process (once; again is a no-op)."""
    import torch.distributed as dist
    from drivetrain.plugin_api.errors import DistributedError

    if not dist.is_available():
        raise DistributedError("this torch build has no torch.distributed; toyaccel processes cannot be connected")
    if BACKEND in dist.Backend.backend_list:
        return
    # devices=["cpu"]: toyaccel tensors are CPU tensors; gloo stays the default for plain "cpu".
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu"])
