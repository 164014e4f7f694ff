"""The run's collectives over XLA's own communication (``xm.all_reduce``, ``xm.all_gather``,
``xm.collective_broadcast``, ``xm.rendezvous``), across the replicas torch_xla started.

XLA collectives are operations of the lazy graph: each one is recorded, and runs when the
graph is cut. Every replica must record the same collectives in the same order.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

_REDUCE_TYPES = {"sum": xm.REDUCE_SUM, "max": xm.REDUCE_MAX, "min": xm.REDUCE_MIN, "product": xm.REDUCE_MUL}


class XlaCollectives:
    """The replicas of this XLA job: ``world_size`` and ``rank`` are torch_xla's."""

    def __init__(self) -> None:
        self.world_size = int(xr.world_size())
        self.rank = int(xr.global_ordinal())
        self._rendezvous = 0

    def all_gather_into(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() == 0:
            tensor = tensor.reshape(1)
        if self.world_size == 1:
            return tensor
        return xm.all_gather(tensor, dim=0)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return list(self.all_gather_into(tensor.unsqueeze(0)).unbind(0))

    def all_reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        if self.world_size == 1:
            return tensor
        if reduction == "mean":
            if tensor.is_floating_point() or tensor.is_complex():
                reduced = xm.all_reduce(xm.REDUCE_SUM, tensor, scale=1.0 / self.world_size)
            else:
                reduced = torch.div(xm.all_reduce(xm.REDUCE_SUM, tensor), self.world_size, rounding_mode="floor")
        else:
            reduced = xm.all_reduce(_REDUCE_TYPES[reduction], tensor)
        tensor.copy_(reduced)
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        if self.world_size > 1:
            xm.collective_broadcast([tensor], root_ordinal=src)
        return tensor

    def _tag(self) -> str:
        # every replica calls the object collectives in the same order, so the counters agree
        self._rendezvous += 1
        return f"drivetrain.{self._rendezvous}"

    def barrier(self) -> None:
        xm.rendezvous(self._tag())

    def all_gather_object(self, obj: Any) -> list[Any]:
        if self.world_size == 1:
            return [obj]
        payloads = xm.rendezvous(self._tag(), pickle.dumps(obj))
        return [pickle.loads(payload) for payload in payloads]  # peers of this job, not files

    def broadcast_object_list(self, objects: list[Any], src: int = 0) -> list[Any]:
        if self.world_size == 1:
            return objects
        payload = pickle.dumps(list(objects)) if self.rank == src else b""
        received = pickle.loads(xm.rendezvous(self._tag(), payload)[src])
        objects[:] = received
        return objects
