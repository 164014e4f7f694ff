"""How batches reach each process: read locally (``DataLoaderShard``) or read by the main
process and sent in slices (``DataLoaderDispatcher``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _DatasetKind

from ...kernel.errors import ConfigError
from ...runtime.state import PartialState
from ..cross_process import broadcast_object_list
from ...tensors.nested import (
    _as_device,
    _send,
    find_batch_size,
    get_data_structure,
    honor_type,
    is_tensor_information,
    recursively_apply,
    send_to_device,
    slice_tensors,
)
from ..rng import synchronize_rng_states

from .mesh import shares_batches_across_peers
from .progress import _PreparedLoader, _Progress, epoch_followers
from .sharding import BatchSamplerShard, IterableDatasetShard, _Unbatched


def _join(parts: list[Any]) -> Any:
    """Batches of one layout joined into one: tensors concatenated along dimension 0, lists
    of other values (strings, numbers) chained."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    if isinstance(first, Mapping):
        joined = {key: _join([part[key] for part in parts]) for key in first}
        try:
            return type(first)(joined)
        except TypeError:
            return joined
    if isinstance(first, (list, tuple)) and all(isinstance(item, (torch.Tensor, Mapping, list, tuple)) for item in first):
        return honor_type(first, (_join([part[i] for part in parts]) for i in range(len(first))))
    if isinstance(first, (list, tuple)):
        return [item for part in parts for item in part]
    return first


def _batch_size(batch: Any) -> int:
    """The first dimension of the first tensor anywhere in ``batch``."""
    for leaf in _tensors_of(batch):
        return leaf.shape[0] if leaf.dim() else 1
    return find_batch_size(batch)  # raises with the reason


def _built_followers(dataset: Any, kwargs: dict[str, Any]) -> list[Any]:
    """A loader built directly (not by ``prepare_data_loader``) passes its epoch to its own
    dataset and samplers."""
    return epoch_followers(dataset, kwargs.get("sampler"), kwargs.get("batch_sampler"))


def _tensors_of(data: Any) -> Iterator[torch.Tensor]:
    if isinstance(data, torch.Tensor):
        yield data
    elif isinstance(data, Mapping):
        for value in data.values():
            yield from _tensors_of(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            yield from _tensors_of(value)


class DataLoaderShard(_PreparedLoader, DataLoader):
    """A ``DataLoader`` that yields this process's batches, on its device.

    Built by :func:`prepare_data_loader`. Each pass synchronises the generators named in
    ``rng_types`` from process 0 first, tells ``GradientState`` when the last batch is out,
    and moves each batch to ``device`` one step ahead.

    Args:
        dataset: the dataset (an :class:`IterableDatasetShard` for an iterable one).
        device: where batches go (``None``: they stay where the dataset puts them).
        rng_types: generators to synchronise at each pass: ``"torch"``, ``"generator"``
            (``synchronized_generator``) and the platform's name.
        synchronized_generator: the generator ``"generator"`` refers to.
        skip_batches: batches to leave out at the start of every pass.
        use_stateful_dataloader: build the loader as a torchdata ``StatefulDataLoader``
            (its ``state_dict`` is then torchdata's, see :mod:`.stateful`).
        torch_device_mesh: the run's ``DeviceMesh``, kept as ``torch_device_mesh`` (the share
            this loader reads was decided when it was built, see :func:`prepare_data_loader`).
        iteration: the epoch to start at (as :meth:`set_epoch`).
        **kwargs: the ``DataLoader`` arguments.
    """

    def __init__(self, dataset: Any, device: Any = None, rng_types: list[str] | None = None,
                 synchronized_generator: torch.Generator | None = None, skip_batches: int = 0,
                 use_stateful_dataloader: bool = False, _drop_last: bool = False, _non_blocking: bool = False,
                 torch_device_mesh: Any = None, iteration: int = 0,
                 *, _progress: _Progress | None = None, _shard_sampler: BatchSamplerShard | None = None,
                 **kwargs: Any) -> None:
        construction = dict(dataset=dataset, device=device, rng_types=rng_types, torch_device_mesh=torch_device_mesh,
                            synchronized_generator=synchronized_generator,
                            use_stateful_dataloader=use_stateful_dataloader, _drop_last=_drop_last,
                            _non_blocking=_non_blocking, _shard_sampler=_shard_sampler, **kwargs)
        if _progress is None:
            _progress = _Progress(torch.initial_seed(), 1, 0, [], [], _built_followers(dataset, kwargs),
                                  agree_on_seed=False)
        kwargs["generator"] = _progress.loader_generator_for(kwargs.get("generator"), use_stateful_dataloader)
        super().__init__(dataset, **kwargs)
        self.device = device
        self.rng_types = rng_types
        self.synchronized_generator = synchronized_generator
        self._init_state(_progress, skip_batches, _drop_last, _non_blocking, use_stateful_dataloader, construction,
                         torch_device_mesh, _shard_sampler, iteration)

    @property
    def total_batch_size(self) -> int | None:
        shard = self._shard_sampler
        if shard is not None:
            if shard.batch_size is None:
                return None
            return shard.batch_size if shard.split_batches else shard.batch_size * shard.num_processes
        if isinstance(self.dataset, IterableDatasetShard):
            return self.dataset.round_size
        return self.batch_size

    def _last_batch_real_samples(self) -> int:
        """How many samples of the last global batch are real (0: none were added)."""
        shard = self._shard_sampler
        if shard is not None:
            if shard.drop_last or (shard.num_processes > 1 and not shard.even_batches):
                return 0
            samples = shard._samples_per_epoch()
            if samples is None:
                samples = self.total_dataset_length
            total = self.total_batch_size
            return -1 if samples is None or not total else samples % total
        if isinstance(self.dataset, IterableDatasetShard):
            shard_set = self.dataset
            if shard_set.drop_last or not shard_set.even_batches:
                return 0
            length = self.total_dataset_length
            return -1 if length is None else length % shard_set.round_size
        length = self.total_dataset_length
        if self._drop_last or self.drop_last:
            return 0
        return -1 if length is None or not self.batch_size else length % self.batch_size

    def _iterate(self) -> Iterator[Any]:
        if self.rng_types:
            types = [t for t in self.rng_types if str(t) != "generator" or self.synchronized_generator is not None]
            synchronize_rng_states(types, self.synchronized_generator)
        skip = self._begin_pass()
        self.begin()
        try:
            discard = skip
            if skip and self._shard_sampler is not None:
                self._shard_sampler.skip_next(skip)  # the sampler jumps to the position
                discard = 0
            elif skip:
                discard = self._resume_stream(skip)
            iterator = self._torch_iterator()
            yield from self._play(iterator, discard)
        finally:
            self.end()

    def _play(self, iterator: Iterator[Any], discard: int) -> Iterator[Any]:
        progress = self._progress
        device, non_blocking = _as_device(self.device), self._non_blocking
        try:
            for _ in range(discard):
                next(iterator)
            current = next(iterator)
        except StopIteration:
            self.end_of_dataloader = True
            self._handed_out(None)
            progress.finish_pass()
            return
        read = self._snapshot()
        while True:
            if device is not None:
                current = _send(current, device, non_blocking, [])
            try:
                upcoming = next(iterator)
            except StopIteration:
                self.end_of_dataloader = True
                progress.batches_yielded += 1
                self._handed_out(read)
                yield current
                break
            progress.batches_yielded += 1
            self._handed_out(read)
            read = self._snapshot()
            yield current
            current = upcoming
        self._handed_out(None)
        progress.finish_pass()


class DataLoaderDispatcher(_PreparedLoader, DataLoader):
    """A ``DataLoader`` read by the main process only, each batch sliced out to every process.

    The main process reads ``num_processes`` batches (one with ``split_batches``), joins them
    and sends the result; each process keeps its contiguous slice. The last incomplete batch
    is dropped with ``_drop_last``, completed with samples from the first batch with
    ``even_batches`` (so every process gets the same share), or shared out as it is.

    Args:
        dataset: the dataset; only the main process reads it.
        split_batches: each batch of the loader is cut into ``num_processes`` pieces,
            instead of each process receiving a full batch.
        skip_batches: batches to leave out at the start of every pass.
        slice_fn: ``slice_fn(batch, slice, process_index, num_processes)`` cuts a process's
            share (default: :func:`~drivetrain.utils.slice_tensors`); leaves that are not
            tensors reach every process whole.
        torch_device_mesh: the run's ``DeviceMesh``, kept as ``torch_device_mesh``; one with
            model-parallel dimensions is refused (each process gets its own slice, which such
            peers could not share).
        iteration: the epoch to start at (as :meth:`set_epoch`).
        device: where batches go (default: the process's device, where they are received).
        even_batches: complete the last batch as described above.
        **kwargs: the ``DataLoader`` arguments.
    """

    def __init__(self, dataset: Any, split_batches: bool = False, skip_batches: int = 0,
                 use_stateful_dataloader: bool = False, _drop_last: bool = False, _non_blocking: bool = False,
                 slice_fn: Callable | None = None, torch_device_mesh: Any = None, iteration: int = 0, *,
                 device: Any = None, even_batches: bool = True,
                 _progress: _Progress | None = None, _shard_sampler: BatchSamplerShard | None = None,
                 **kwargs: Any) -> None:
        construction = dict(dataset=dataset, split_batches=split_batches,
                            use_stateful_dataloader=use_stateful_dataloader, _drop_last=_drop_last,
                            _non_blocking=_non_blocking, slice_fn=slice_fn, torch_device_mesh=torch_device_mesh,
                            device=device,
                            even_batches=even_batches, _shard_sampler=_shard_sampler, **kwargs)
        if torch_device_mesh is not None and shares_batches_across_peers(torch_device_mesh):
            raise ConfigError("DataLoaderDispatcher gives each process its own slice, which model-parallel peers of "
                              "torch_device_mesh cannot share; use DataLoaderShard (dispatch_batches=False)")
        state = PartialState()
        if _progress is None:
            _progress = _Progress(torch.initial_seed(), state.num_processes, state.process_index, [], [],
                                  _built_followers(dataset, kwargs), agree_on_seed=False)
        kwargs["generator"] = _progress.loader_generator_for(kwargs.get("generator"), use_stateful_dataloader)
        super().__init__(dataset, **kwargs)
        self.split_batches = split_batches
        self.slice_fn = slice_fn or slice_tensors
        self.device = device
        self.even_batches = even_batches
        self.state = state
        self._init_state(_progress, skip_batches, _drop_last, _non_blocking, use_stateful_dataloader, construction,
                         torch_device_mesh, _shard_sampler, iteration)

    def __getstate__(self) -> dict[str, Any]:
        # the process state holds the environment, which does not pickle; it is the
        # process's own, so an unpickled loader takes the state of the process it is in
        kept = self.__dict__.copy()
        kept.pop("state", None)
        return kept

    def __setstate__(self, kept: dict[str, Any]) -> None:
        self.__dict__.update(kept)
        self.state = PartialState()

    @property
    def total_batch_size(self) -> int | None:
        size = self._base_batch_size()
        if size is None:
            return None
        return size if self.split_batches else size * self.state.num_processes

    def _base_batch_size(self) -> int | None:
        if self.batch_size is not None:
            return self.batch_size
        return getattr(self.batch_sampler, "batch_size", None)

    def __len__(self) -> int:
        whole = DataLoader.__len__(self)
        if not self.split_batches:
            n = self.state.num_processes
            whole = whole // n if self._drop_last else math.ceil(whole / n)
        return max(whole - self.skip_batches, 0)

    def _fetch(self, iterator: Iterator[Any] | None) -> tuple[Any, bool]:
        """The next global batch from the main process's loader, and whether there was one."""
        wanted = 1 if self.split_batches else self.state.num_processes
        parts = []
        for _ in range(wanted):
            try:
                parts.append(next(iterator))
            except StopIteration:
                break
        if not parts:
            return None, False
        if len(parts) < wanted and self._drop_last:
            return None, False
        return (parts[0] if len(parts) == 1 else _join(parts)), True

    def _share(self, batch: Any, first: Any, is_last: bool,
               epoch_first: Callable[[], Any] | None = None) -> tuple[Any, int]:
        """The batch to send out (``None``: drop it) and, for the last one, how many of its samples
        are real: Accelerate's ``remainder`` of a dispatched loader is the last global batch's
        size, padded or not, since callers (transformers' evaluation) may repeat one value per
        sample of a full batch and count on ``gather_for_metrics`` to cut it to the real ones.
        ``first`` is the epoch's first batch, else ``epoch_first`` reads it (a resumed pass)."""
        if not is_last:
            return batch, 0
        n = self.state.num_processes
        size = _batch_size(batch)
        full = self.total_batch_size
        if self._drop_last and full is not None and size < full:
            return None, 0
        if size % n == 0 or not self.even_batches:
            return batch, size
        target = math.ceil(size / n) * n
        if first is None and epoch_first is not None:
            first = epoch_first()
        parts, have = [batch], size
        while have < target:
            parts.append(first)
            have += _batch_size(first)
        return slice_tensors(_join(parts), slice(0, target)), size

    def _iterate(self) -> Iterator[Any]:
        skip = self._begin_pass()
        self.begin()
        try:
            yield from self._play(skip)
        finally:
            self.end()

    def _play(self, skip: int) -> Iterator[Any]:
        state, progress = self.state, self._progress
        main = state.process_index == 0
        iterator = None
        first = None
        epoch_first = None  # reads the epoch's first batch, for a pass that starts after it
        wanted = 1 if self.split_batches else state.num_processes
        if main:
            if skip and self._shard_sampler is not None:
                self._shard_sampler.skip_next(skip * wanted, keep_first=wanted)
                skip_reads = 0
                epoch_first = self._first_from_sampler
            else:
                skip_reads = self._resume_stream(skip) if skip else 0
                if skip and not skip_reads:
                    epoch_first = self._first_from_stream_start
            iterator = self._torch_iterator()
            for number in range(skip_reads):
                fetched, _ = self._fetch(iterator)
                if number == 0:
                    first = fetched
        current, have_current = self._fetch(iterator) if main else (None, False)
        read = self._snapshot() if main else None
        while True:
            message = None
            if main:
                upcoming, have_upcoming = self._fetch(iterator) if have_current else (None, False)
                read_upcoming = self._snapshot() if have_current else None
                if first is None and have_current and epoch_first is None:
                    first = current
                payload, real = (self._share(current, first, not have_upcoming, epoch_first) if have_current
                                 else (None, 0))
                if payload is None:
                    have_current = False
                # [layout of this batch, is it the last, its real samples if last, size of the next one]
                message = [get_data_structure(payload) if have_current else None, have_current and not have_upcoming,
                           real, _batch_size(upcoming) if have_upcoming else None]
            structure, is_last, real, upcoming_size = broadcast_object_list([message])[0]
            if structure is None:
                self.end_of_dataloader = True
                break
            piece = self._slice(self._receive(payload if main else None, structure))
            # Without even_batches, a process may get nothing from the last batch: its own
            # last batch is then this one.
            if is_last or (not self.even_batches and upcoming_size is not None
                           and self._share_bounds(upcoming_size) is None):
                self.end_of_dataloader = True
                self.remainder = real
            if piece is not None:
                progress.batches_yielded += 1
                self._handed_out(read)
                yield piece
            if is_last:
                break
            if main:
                current, have_current, read = upcoming, have_upcoming, read_upcoming
        self._handed_out(None)
        progress.finish_pass()

    def _fetcher(self) -> Any:
        """A reader of batches as this loader's iterator reads them (for the epoch's first ones)."""
        return _DatasetKind.create_fetcher(self._dataset_kind, self.dataset, self._auto_collation, self.collate_fn,
                                           self.drop_last)

    def _first_from_sampler(self) -> Any:
        """The epoch's first global batch, loaded by the indices the sampler kept when it jumped."""
        fetcher, unbatched = self._fetcher(), isinstance(self.sampler, _Unbatched)
        parts = [fetcher.fetch(indices[0] if unbatched else indices) for indices in self._shard_sampler.skipped_first]
        return parts[0] if len(parts) == 1 else _join(parts)

    def _first_from_stream_start(self) -> Any:
        """The epoch's first global batch, read again from the iterable dataset's start state."""
        stream = self._progress.stream
        stream.stream.load_state_dict(stream.start)
        fetcher = self._fetcher()
        wanted = 1 if self.split_batches else self.state.num_processes
        parts = []
        for _ in range(wanted):
            try:
                parts.append(fetcher.fetch([None] * self.batch_size if self._auto_collation else None))
            except StopIteration:
                break
        return parts[0] if len(parts) == 1 else _join(parts)

    def _receive(self, batch: Any, structure: Any) -> Any:
        """The main process's batch on every process (leaves that are not tensors travel
        inside ``structure``)."""
        device = self.state.device
        if batch is None:
            batch = recursively_apply(lambda info: torch.empty(info.shape, dtype=info.dtype, device=device), structure,
                                      test_type=is_tensor_information)
        else:
            batch = send_to_device(batch, device)
        collectives = self.state.collectives
        return recursively_apply(lambda tensor: collectives.broadcast(tensor.contiguous(), src=0), batch)

    def _share_bounds(self, size: int) -> slice | None:
        """This process's slice of a batch of ``size`` samples (``None``: nothing for it)."""
        n, me = self.state.num_processes, self.state.process_index
        share = math.ceil(size / n)
        return None if share * me >= size else slice(me * share, (me + 1) * share)

    def _slice(self, batch: Any) -> Any:
        bounds = self._share_bounds(_batch_size(batch))
        if bounds is None:
            return None
        piece = self.slice_fn(batch, bounds, self.state.process_index, self.state.num_processes)
        if self.device is not None:
            piece = send_to_device(piece, self.device, non_blocking=self._non_blocking)
        return piece
