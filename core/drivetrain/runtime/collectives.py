"""The collective operations a run uses, as an interface.

A communication plugin's ``drivetrain_collectives`` hook returns an object of this shape; the
operations in ``drivetrain.utils`` apply it to every tensor of a nested structure. Every
method takes and returns single tensors (or picklable objects) and must be called by every
process of the group in the same order. A method whose backend fails raises
``DistributedError`` (from ``drivetrain.plugin_api``) with the backend's reason in one line:
the operation that called it adds its own name and the likely cause (processes that passed
different shapes or dtypes).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import torch

REDUCTIONS = ("sum", "mean", "max", "min", "product")


@runtime_checkable
class Collectives(Protocol):
    """Operations on the run's process group."""

    world_size: int
    rank: int

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every process's ``tensor`` (same shape everywhere), in rank order."""

    def all_gather_into(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's ``tensor`` (same shape everywhere) concatenated along dimension 0,
        in rank order, in one call. A 0-dimensional tensor counts as one element, so the
        result has shape ``(world_size,)``. ``drivetrain.utils.gather`` is built on it. A
        tensor that requires grad (a parameter) is accepted: gathered values are data, and
        the result of more than one process carries no autograd history."""

    def all_reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        """Combine ``tensor`` across processes with one of :data:`REDUCTIONS`; returns the result."""

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Process ``src``'s ``tensor`` on every process, written into ``tensor`` (which has
        the same shape and dtype everywhere) and returned."""

    def barrier(self) -> None:
        """Return once every process has called it."""

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every process's picklable ``obj``, in rank order."""

    def broadcast_object_list(self, objects: list[Any], src: int = 0) -> list[Any]:
        """Process ``src``'s list of picklable objects, filled in place on every process."""

    # Optional (looked up with ``getattr``): an implementation without it gets a blocking
    # ``all_reduce(..., "max")`` of a one-element tensor in its place.
    #
    # def start_flag_max(self, value: int) -> Callable[[], int]:
    #     """Start the maximum of a small integer over every process, on a channel of its own
    #     beside the run's collectives (no device work, no order with them), and return at
    #     once a function that waits for the result. Every process calls both in the same
    #     order. The run's preemption check starts one at each optimizer step and waits for
    #     it at the next, so the step never waits on it."""


def blocking_flag_max(collectives: Any, value: int, device: Any = None) -> Callable[[], int]:
    """:meth:`Collectives.start_flag_max` for an implementation that lacks it: the maximum,
    computed now with the run's ``all_reduce``."""
    result = int(collectives.all_reduce(torch.tensor([value], dtype=torch.int32, device=device), "max").item())
    return lambda: result


class SingleProcessCollectives:
    """The collectives of a group of one: everything is already where it belongs."""

    world_size = 1
    rank = 0

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return [tensor]

    def all_gather_into(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.reshape(1) if tensor.dim() == 0 else tensor

    def all_reduce(self, tensor: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        return tensor

    def barrier(self) -> None:
        return None

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast_object_list(self, objects: list[Any], src: int = 0) -> list[Any]:
        return objects

    def start_flag_max(self, value: int) -> Callable[[], int]:
        return lambda: value


__all__: Sequence[str] = ("Collectives", "SingleProcessCollectives", "REDUCTIONS")
