"""What a non-blocking ``save_state`` keeps, and writes after returning.

``save_state(blocking=False)`` copies everything it saves off the training tensors into
host memory (:func:`copy_to_host`), then returns; writing, hashing, syncing and committing
run on the commit's thread. A strategy plugin that writes its own files may split its save
the same way: it does what needs the other processes (gathering a sharded state, planning)
inside its save hook, and hands the writing to :class:`DeferredWrites`, which the core runs
on that thread before hashing the files.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import torch

__all__ = ["DeferredWrites", "HostStaging", "copy_to_host"]


class DeferredWrites:
    """Writes a strategy hands to the core during a non-blocking save.

    Each write runs on the commit's thread, after ``save_state`` has returned, with no
    collective of the process group (training uses it meanwhile): whatever needs the other
    processes must be done in the save hook itself. A write returns the names of the files it
    wrote (relative to the checkpoint directory), which the core hashes and syncs.
    """

    def __init__(self) -> None:
        self._writes: list[Callable[[], Sequence[str]]] = []

    def defer(self, write: Callable[[], Sequence[str]]) -> None:
        """Run ``write`` on the commit's thread; it returns the files it wrote."""
        self._writes.append(write)

    def run(self) -> list[str]:
        names: list[str] = []
        for write in self._writes:
            names += list(write())
        return names

    def __len__(self) -> int:
        return len(self._writes)


def copy_to_host(tree: Any, staging: HostStaging | None = None, path: tuple = ()) -> Any:
    """``tree`` (dicts, lists, tuples of tensors and plain values) with every tensor copied to
    host memory: what training does next cannot change the copy. With ``staging``, the
    copies go into the buffers of the previous save where the tensor at the same place has
    the same shape and dtype."""
    if isinstance(tree, torch.Tensor):
        tensor = tree.detach()
        if tensor.device.type == "meta":
            return tensor
        return staging.copy(path, tensor) if staging is not None else tensor.to("cpu", copy=True)
    if isinstance(tree, dict):
        copied = copy.copy(tree)  # keeps the mapping's class (an OrderedDict, a defaultdict's factory)
        for key, value in tree.items():
            copied[key] = copy_to_host(value, staging, (*path, key))
        return copied
    if isinstance(tree, list):
        return [copy_to_host(value, staging, (*path, index)) for index, value in enumerate(tree)]
    if isinstance(tree, tuple):
        values = [copy_to_host(value, staging, (*path, index)) for index, value in enumerate(tree)]
        return type(tree)(*values) if hasattr(tree, "_fields") else type(tree)(values)
    return copy.deepcopy(tree)


class HostStaging:
    """Host buffers a non-blocking save copies into, kept for the next one.

    Fresh memory costs a page fault per page the first time it is written (on a virtual
    machine, often a trip to the host), several times the copy itself; the state of a run
    has the same tensors at every save, so keeping their buffers makes every save after the
    first a plain copy. Safe because a save waits for the previous one's commit before it
    copies. Holds one copy of the saved state, as long as the run saves without blocking.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._used: dict[tuple, torch.Tensor] = {}
        self._copies: list[tuple[torch.Tensor, torch.Tensor]] = []

    def begin(self) -> None:
        """A new save: buffers not used by it are let go at :meth:`end`."""
        self._used, self._copies = {}, []

    def copy(self, path: tuple, tensor: torch.Tensor) -> torch.Tensor:
        """The buffer ``tensor`` is copied into; the copy is made by :meth:`end`."""
        buffer = self._buffers.get(path)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
        self._copies.append((buffer, tensor))
        self._used[path] = buffer
        return buffer

    def end(self) -> None:
        """Make every copy asked for, on the checkpoint I/O threads (a copy releases the
        interpreter lock, and one core alone does not reach the memory's bandwidth)."""
        from .io_pool import FileJobs

        copies, self._copies = self._copies, []
        with FileJobs() as jobs:
            for buffer, tensor in sorted(copies, key=lambda pair: -pair[1].numel()):
                jobs.submit(buffer.copy_, tensor)
        self._buffers = self._used
