"""Offloaded weights streamed to the modules that use them, read ahead on a background thread.

One :class:`WeightStreamer` serves every offloading hook of a dispatched model. When a
module's forward starts, its weights are taken from what the background reader already
brought in (or read then, if the reader was not ahead); the reader then goes on with the
modules that ran after this one the last time (the order is learnt as the model runs, so it
follows the model's real execution order, generation step after generation step), as far as
the read-ahead window allows. When the forward ends, the module's weights are released: a
view of a mapped file gives its pages back to the page cache.

Why a window: what has been read ahead is resident, so the bytes of the weights in use plus
those read ahead never exceed ``window_bytes``. Dispatching sets it to the largest
offloaded module, the room a device map already keeps free on the execution device for
loading one offloaded module (so a ``max_memory`` budget stays respected), and at least
:data:`MIN_WINDOW_BYTES`.

Moving weights to an accelerator (CPU-offloaded modules of a model running on a GPU) is done
by the reader too, so the copy of the next module overlaps the current one's forward.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import torch

from .mapped_files import MappedFiles, drop_pages, read_ahead_pages
from .offload import OffloadedWeightsLoader, PrefixedDataset, mapped_files_of, weight_view

if TYPE_CHECKING:
    from torch import nn

__all__ = ["WeightStreamer", "StreamedModule", "MIN_WINDOW_BYTES"]

#: The smallest read-ahead window: a few small modules ahead even when every module is small.
MIN_WINDOW_BYTES = 16 * 2**20
#: Released weights are handed to the reader to drop in batches of about this many bytes
#: (one hand-over per small module would cost the forward more than the drop itself).
DROP_BATCH_BYTES = 8 * 2**20


class StreamedModule:
    """What the streamer knows of one offloading hook: where its weights come from, which
    ones, in which dtype and on which device they are used, and how many bytes they are."""

    def __init__(self, weights: Mapping, names: list[str], dtypes: dict[str, torch.dtype], device: torch.device,
                 nbytes: int) -> None:
        self.weights = weights
        self.names = names
        self.dtypes = dtypes  # the module's own dtype per floating-point weight: what it computes in
        self.device = device
        self.nbytes = nbytes
        self.files: MappedFiles | None = mapped_files_of(weights)
        self._views: dict[str, torch.Tensor] | None = None  # every weight a view of a mapped file: kept
        self._paths: list[str] = []  # the files the views map

    @property
    def read_is_quick(self) -> bool:
        """Whether :meth:`read` only asks the kernel to read ahead (its views are made)."""
        return self._views is not None
    def read(self) -> dict[str, torch.Tensor]:
        """Every weight of the module, ready for its forward (runs on the reader thread).

        When no weight needs a copy (views of mapped files, or tensors kept in memory already
        in the module's dtype and on its device) the tensors are kept after the first read: a
        view is only an address range until its pages are touched, and each later read asks
        the kernel to read those pages ahead, so that the forward finds them in memory
        instead of waiting on the disk. Weights used in another dtype or on another device
        are copied at each read: that copy is what the reader overlaps with the forward
        before."""
        if self._views is not None:
            for tensor in self._views.values():
                read_ahead_pages(tensor)
            return self._views
        loaded, no_copy = {}, True
        for name in self.names:
            loaded[name], copied = self._prepare(name)
            no_copy = no_copy and not copied
        if no_copy:
            self._views = loaded
            if self.files is not None:
                self._paths = sorted({self.files.path_of(t) for t in loaded.values() if t.numel()})
        return loaded

    def check_files(self) -> None:
        """Raise :class:`CheckpointError` if a file this module's views map was cut short since
        (reading past a file's end through a mapping kills the process with SIGBUS)."""
        if self.files is not None:
            self.files.check_unchanged(self._paths if self._views is not None else self.files.paths())

    def read_one(self, name: str) -> torch.Tensor:
        """Weight ``name`` in the dtype and on the device the module computes with."""
        return self._prepare(name)[0]

    def _prepare(self, name: str) -> tuple[torch.Tensor, bool]:
        """(weight ``name`` as the module computes with it, whether that took a copy)."""
        source = tensor = weight_view(self.weights, name)
        wanted = self.dtypes.get(name)
        if wanted is not None and tensor.is_floating_point() and tensor.dtype != wanted:
            tensor = tensor.to(wanted)  # the conversion set_module_tensor_to_device would make
        if tensor.device != self.device:
            tensor = tensor.to(self.device)
        if self.files is not None and self.files.owns(tensor):
            read_ahead_pages(tensor)
        # a view made by the weights map itself (a misaligned one, say) is a copy too
        copied = tensor is not source or (self.files is not None and not self.files.owns(tensor)
                                          and not _kept_in_memory(self.weights, name, tensor))
        return tensor, copied

    def release(self, loaded: dict[str, torch.Tensor]) -> None:
        """The forward is over: views of mapped files give their pages back."""
        self.release_tensors(loaded.values())

    def release_tensors(self, tensors: Iterable[torch.Tensor]) -> None:
        if self.files is None:
            return
        for tensor in tensors:
            if self.files.owns(tensor):
                drop_pages(tensor)


def _kept_in_memory(weights: Mapping, name: str, tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is the very tensor ``weights`` keeps in memory for ``name``."""
    while isinstance(weights, PrefixedDataset):
        weights, name = weights.dataset, f"{weights.prefix}{name}"
    if isinstance(weights, OffloadedWeightsLoader):
        return weights.state_dict.get(name) is tensor
    return True  # a plain mapping of tensors gives its own


class WeightStreamer:
    """Reads the weights of offloaded modules ahead of their forward, within a byte window.

    ``take`` and ``release`` are called from the forward (one thread); the background reader
    runs only the reads and the page drops handed to it, so the bookkeeping needs no lock.
    """

    def __init__(self, window_bytes: int = MIN_WINDOW_BYTES, read_ahead: bool = True) -> None:
        self.window_bytes = max(int(window_bytes), 0)
        self.read_ahead = read_ahead
        self._modules: dict[int, StreamedModule] = {}
        self._next: dict[int, int] = {}  # module -> the module whose forward came after it last time
        self._last: int | None = None
        # read ahead, in the order they were asked: being read, or read already
        self._pending: OrderedDict[int, Future | dict[str, torch.Tensor]] = OrderedDict()
        self._in_use: dict[int, dict[str, torch.Tensor]] = {}
        self._held = 0  # bytes of the modules in use and read ahead
        self._to_drop: list[tuple[StreamedModule, dict[str, torch.Tensor]]] = []
        self._drop_queued = False
        self._drop_bytes = 0  # released since the last drop was handed to the reader
        self._reader: ThreadPoolExecutor | None = None
        self._reader_lock = threading.Lock()
        #: How many forwards found their module's weights read ahead, and how many read them then.
        self.taken_read_ahead = 0
        self.taken_on_demand = 0

    def register(self, key: int, module: StreamedModule) -> None:
        """Stream ``module``'s weights under ``key``. Modules registered one after the other are
        first guessed to run in that order."""
        if self._modules and key not in self._modules:
            self._next.setdefault(next(reversed(self._modules)), key)
        self._modules[key] = module

    def fit_window_to_largest(self) -> None:
        """Make the window the largest registered module (at least :data:`MIN_WINDOW_BYTES`)."""
        largest = max((module.nbytes for module in self._modules.values()), default=0)
        self.window_bytes = max(largest, MIN_WINDOW_BYTES)

    def take(self, key: int) -> dict[str, torch.Tensor]:
        """The weights of module ``key`` for the forward that starts now."""
        module = self._modules[key]
        if key in self._pending:
            self.taken_read_ahead += 1
            self._drop_stale_before(key)
            ahead = self._pending.pop(key)
            loaded = ahead.result() if isinstance(ahead, Future) else ahead
            self._held -= module.nbytes
        else:
            self.taken_on_demand += 1
            self._drop_pending()  # the guessed order broke: what was read ahead will not be used next
            loaded = module.read()
        module.check_files()  # just before use: the file may have changed since it was read ahead
        if key not in self._in_use:
            self._held += module.nbytes
        self._in_use[key] = loaded
        if self._last is not None and self._last != key:
            self._next[self._last] = key
        self._last = key
        if not self._pending:  # otherwise the release that frees room goes on reading ahead
            self._read_ahead_from(key)
        return loaded

    def release(self, key: int) -> None:
        """Module ``key``'s forward is over."""
        loaded = self._in_use.pop(key, None)
        if loaded is not None:
            module = self._modules[key]
            self._held -= module.nbytes
            if self.read_ahead:  # on the reader: dropping pages then costs the forward nothing
                self._to_drop.append((module, loaded))
                self._drop_bytes += module.nbytes
                if not self._drop_queued and self._drop_bytes >= DROP_BATCH_BYTES:
                    self._drop_queued = True
                    self._drop_bytes = 0
                    self._submit(self._drop_released)
            else:
                module.release(loaded)
        if self._last is not None:
            self._read_ahead_from(self._last)

    def _drop_released(self) -> None:
        # The flag goes down first: a release after it queues another drop, one before it is
        # popped below (list.append and list.pop are atomic).
        self._drop_queued = False
        while self._to_drop:
            module, loaded = self._to_drop.pop()
            module.release(loaded)

    def _read_ahead_from(self, key: int) -> None:
        """Read ahead the modules expected after ``key`` while they fit the window. The walk
        goes on from the last module already read ahead, so a call costs what it adds."""
        if not self.read_ahead:
            return
        current = next(reversed(self._pending)) if self._pending else key
        following = self._next.get(current)
        while following is not None and following != key and following not in self._pending \
                and following not in self._in_use:
            module = self._modules[following]
            if self._held + module.nbytes > self.window_bytes:
                return
            # A module read before is views already: asking the kernel to read their pages
            # ahead returns at once, so it is done here rather than through the reader.
            self._pending[following] = module.read() if module.read_is_quick else self._submit(module.read)
            self._held += module.nbytes
            following = self._next.get(following)

    def _submit(self, work: Callable[[], Any]) -> Future:
        with self._reader_lock:
            if self._reader is None:
                self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drivetrain-weights-reader")
            return self._reader.submit(work)

    def _drop_stale_before(self, taken: int) -> None:
        """Modules read ahead before the one now taken were skipped this time: drop them."""
        while self._pending:
            key = next(iter(self._pending))
            if key == taken:
                return
            self._discard(key, self._pending.pop(key))

    def _drop_pending(self) -> None:
        while self._pending:
            key, future = self._pending.popitem(last=False)
            self._discard(key, future)

    def _discard(self, key: int, ahead: Future | dict[str, torch.Tensor]) -> None:
        module = self._modules[key]
        self._held -= module.nbytes
        if not isinstance(ahead, Future):
            module.release(ahead)
            return
        if ahead.cancel():
            return
        try:
            loaded = ahead.result()
        except Exception:  # noqa: BLE001 - the module was not used; its error shows when it is
            return
        module.release(loaded)


def module_dtypes(module: "nn.Module", names: list[str]) -> dict[str, torch.dtype]:
    """The dtype of each floating-point tensor of ``module`` named in ``names`` (dotted)."""
    dtypes: dict[str, Any] = {}
    for name in names:
        owner_name, _, attribute = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        tensor = owner._parameters.get(attribute)
        if tensor is None:
            tensor = owner._buffers.get(attribute)
        if tensor is not None and tensor.is_floating_point():
            dtypes[name] = tensor.dtype
    return dtypes
