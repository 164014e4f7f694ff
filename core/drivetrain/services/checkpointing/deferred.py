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

__all__ = ["DeferredWrites", "copy_to_host"]


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


def copy_to_host(tree: Any) -> Any:
    """``tree`` (dicts, lists, tuples of tensors and plain values) with every tensor copied to
    host memory: what training does next cannot change the copy."""
    if isinstance(tree, torch.Tensor):
        tensor = tree.detach()
        return tensor.to("cpu", copy=True) if tensor.device.type != "meta" else tensor
    if isinstance(tree, dict):
        copied = copy.copy(tree)  # keeps the mapping's class (an OrderedDict, a defaultdict's factory)
        for key, value in tree.items():
            copied[key] = copy_to_host(value)
        return copied
    if isinstance(tree, list):
        return [copy_to_host(value) for value in tree]
    if isinstance(tree, tuple):
        values = [copy_to_host(value) for value in tree]
        return type(tree)(*values) if hasattr(tree, "_fields") else type(tree)(values)
    return copy.deepcopy(tree)
