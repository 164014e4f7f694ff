"""Which share of the data a process reads when a ``DeviceMesh`` lays out its processes.

Processes that differ only along a model-parallel dimension of the mesh (tensor or context
parallel peers) read the same batches; the data-parallel dimensions (Accelerate's names start
with ``dp``: ``dp_replicate``, ``dp_shard``, or a flattened ``dp``) decide the share.
"""

from __future__ import annotations

import math
from typing import Any

from ...kernel.errors import ConfigError


def data_parallel_dims(mesh: Any) -> list[int]:
    """Indices of the mesh's data-parallel dimensions."""
    names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
    if not names:
        raise ConfigError("torch_device_mesh needs named dimensions (DeviceMesh(..., mesh_dim_names=...)) to tell "
                          "its data-parallel ones (named dp...) from the model-parallel ones")
    return [index for index, name in enumerate(names) if name.startswith("dp")]


def data_parallel_share(mesh: Any) -> tuple[int, int]:
    """``(rank, size)`` of this process among the data-parallel groups of ``mesh``.

    With no data-parallel dimension every process of the mesh reads the same data: ``(0, 1)``.
    """
    dims = data_parallel_dims(mesh)
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise ConfigError("this process is not part of torch_device_mesh; pass the mesh the run's processes form")
    shape = tuple(mesh.mesh.shape)
    rank = 0
    for dim in dims:  # row-major over the data-parallel dimensions, as DeviceMesh flattens them
        rank = rank * shape[dim] + coordinate[dim]
    return rank, math.prod(shape[dim] for dim in dims)


def shares_batches_across_peers(mesh: Any) -> bool:
    """Whether some processes of ``mesh`` differ only along model-parallel dimensions."""
    dims = set(data_parallel_dims(mesh))
    return any(size > 1 for index, size in enumerate(mesh.mesh.shape) if index not in dims)
