"""Which samples belong to which process: the sharding rules, samplers and skipping.

The rule that completes a short last round with the epoch's first samples (``even_batches``)
is :func:`fill_round`, shared by batch and iterable sharding; a plain ``BatchSampler``'s
batches go through the same rules as any other batch sampler's."""

from __future__ import annotations

import itertools
import math
from typing import Any, Iterator

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, SequentialSampler

from ...kernel.errors import ConfigError

from .stateful import StatefulVariants


def _mix(*numbers: int) -> int:
    """A 63-bit seed from several integers (stable across runs and processes)."""
    value = 0x2545F4914F6CDD1D
    for number in numbers:
        value = (value * 6364136223846793005 + int(number) + 1442695040888963407) % 2**64
    return value % 2**63


# ------------------------------------------------------------------------ samplers


class SeedableRandomSampler(RandomSampler):
    """A ``RandomSampler`` whose order depends only on a seed and the epoch.

    Epoch ``e`` is shuffled with the sampler's generator seeded with ``initial_seed + e``, so
    every process that shares the seed draws the same order, a run is reproducible, and
    the global torch generator is left alone. The epoch moves on by one after each full
    pass, or is set with :meth:`set_epoch`.

    Args:
        data_seed: the seed (default: ``torch.initial_seed()``, which ``set_seed`` fixes).
        *args, **kwargs: those of ``RandomSampler``. A ``generator`` given is the one reseeded
            at each pass (its own seed does not matter; the user's object stays the sampler's,
            as in Accelerate); without one, the sampler has a private generator.
    """

    def __init__(self, *args: Any, data_seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial_seed = data_seed if data_seed is not None else torch.initial_seed()
        self.epoch = 0
        if self.generator is None:
            self.generator = torch.Generator()

    def __iter__(self) -> Iterator[int]:
        self.generator.manual_seed(self.initial_seed + self.epoch)
        yield from super().__iter__()
        self.set_epoch(self.epoch + 1)

    def set_epoch(self, epoch: int) -> None:
        """Shuffle the next pass as epoch ``epoch``."""
        self.epoch = epoch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "initial_seed": self.initial_seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = state["epoch"]
        self.initial_seed = state["initial_seed"]


def fill_round(items: list[Any], target: int, start: list[Any]) -> list[Any]:
    """``items`` completed to ``target`` entries with the epoch's first ones, cycled: how a short
    last round is evened out so that every process gets as much (``even_batches``)."""
    filled = list(items)
    while len(filled) < target and start:
        filled.extend(start[: target - len(filled)])
    return filled


def _sliced_batches(indices: list[int], size: int, drop_last: bool, first: int = 0) -> Iterator[list[int]]:
    """The batches a plain ``BatchSampler`` of ``size`` makes of ``indices``, from batch
    number ``first`` on (the ones before it are not made)."""
    end = len(indices) - len(indices) % size if drop_last else len(indices)
    return (indices[i:i + size] for i in range(first * size, end, size))


def _all_indices(sampler: Any) -> list[int]:
    """Every index ``sampler`` yields in one pass, as a list.

    A ``RandomSampler`` with its own generator gives the permutation it would yield, drawn
    in one call (its ``__iter__`` hands the indices out one by one through Python), and leaves
    the generator where its ``__iter__`` would: that also draws an empty tail permutation, a
    full one whose state a generator kept across passes carries on with.
    """
    if type(sampler) is SequentialSampler:
        return list(range(len(sampler.data_source)))
    seedable = type(sampler) is SeedableRandomSampler
    if (type(sampler) is RandomSampler or seedable) and not sampler.replacement and sampler.generator is not None \
            and sampler.num_samples == len(sampler.data_source):
        if seedable:  # what its __iter__ does around the permutation
            sampler.generator.manual_seed(sampler.initial_seed + sampler.epoch)
        size = len(sampler.data_source)
        order = torch.randperm(size, generator=sampler.generator).tolist()
        torch.randperm(size, generator=sampler.generator)
        if seedable:
            sampler.set_epoch(sampler.epoch + 1)
        return order
    return list(sampler)


class BatchSamplerShard(BatchSampler):
    """The batches of ``batch_sampler`` that belong to one process.

    Args:
        batch_sampler: the batch sampler to split (every process must build the same one).
        num_processes: how many processes share it.
        process_index: which of them this is.
        split_batches: cut each batch into ``num_processes`` pieces (the batch size must be a
            multiple of ``num_processes``) instead of handing whole batches round-robin.
        even_batches: give every process the same number of batches of the same size,
            completing the last ones with samples from the start of the epoch; without it,
            the last batches are as they come and some processes get one batch fewer.

    With two processes and batches ``[0, 1, 2, 3], [4, 5, 6, 7]``, process 0 gets
    ``[0, 1, 2, 3]`` and process 1 ``[4, 5, 6, 7]``; with ``split_batches``, process 0 gets
    ``[0, 1], [4, 5]`` and process 1 ``[2, 3], [6, 7]``. When the wrapped sampler drops its
    last incomplete batch (``drop_last``), an incomplete last round is dropped too.
    """

    def __init__(self, batch_sampler: Any, num_processes: int = 1, process_index: int = 0,
                 split_batches: bool = False, even_batches: bool = True) -> None:
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = getattr(batch_sampler, "drop_last", False)
        if not 0 <= process_index < num_processes:
            raise ConfigError(f"process_index={process_index} is not in range(num_processes={num_processes})")
        if split_batches and self.batch_size is not None and self.batch_size % num_processes != 0:
            raise ConfigError(
                f"split_batches=True needs a batch size that is a round multiple of the number of processes; "
                f"got batch size {self.batch_size} for {num_processes} processes (make it a multiple, "
                f"or use split_batches=False)")
        if split_batches and self.batch_size is None and even_batches and num_processes > 1:
            raise ConfigError("split_batches=True with even_batches=True cuts every batch into equal pieces, which "
                              "needs a batch sampler with a batch_size; this one has none: use split_batches=False "
                              "or even_batches=False")
        self._skip_next = 0
        self._keep_first = 0
        # the first batches the pass in progress would have yielded from the epoch's start,
        # when it skipped them (see skip_next)
        self.skipped_first: list[list[int]] = []

    @property
    def sampler(self) -> Any:
        return getattr(self.batch_sampler, "sampler", None)

    def skip_next(self, num_batches: int, keep_first: int = 0) -> None:
        """Leave out this process's first ``num_batches`` batches of the next pass only, and
        keep the first ``keep_first`` of them in ``skipped_first`` (a dispatched loader
        completes a short last batch with them)."""
        self._skip_next = num_batches
        self._keep_first = min(keep_first, num_batches)

    def _samples_per_epoch(self) -> int | None:
        sampler = self.sampler
        try:
            return len(sampler) if sampler is not None else None
        except TypeError:
            return None

    def __len__(self) -> int:
        batches = len(self.batch_sampler)
        n = self.num_processes
        if n == 1:
            return batches
        if self.split_batches:
            if self.even_batches or self.drop_last:
                return batches
            samples, size = self._samples_per_epoch(), self.batch_size
            last = samples % size if samples is not None and size else 0
            share = size // n if size else 0
            return batches - 1 if last and self.process_index * share >= last else batches
        rounds, extra = divmod(batches, n)
        if extra == 0 or self.drop_last:
            return rounds
        if self.even_batches:
            return rounds + 1
        return rounds + (1 if self.process_index < extra else 0)

    def __iter__(self) -> Iterator[list[int]]:
        skip, self._skip_next = self._skip_next, 0
        keep, self._keep_first = self._keep_first, 0
        self.skipped_first = []
        inner = self.batch_sampler
        if type(inner) is BatchSampler and hasattr(type(inner.sampler), "__len__"):
            # A plain BatchSampler: read its indices at once and slice its batches (the same
            # batches, without its per-index loop); a skip jumps to its first batch.
            indices = _all_indices(inner.sampler)
            if keep:
                self.skipped_first = list(itertools.islice(
                    self._from_indices(indices, inner.batch_size, inner.drop_last, 0), keep))
            yield from self._from_indices(indices, inner.batch_size, inner.drop_last, skip)
            return
        source = iter(inner)
        if self.num_processes == 1:
            batches = source
        elif self.split_batches:
            batches = self._split(source)
        else:
            batches = self._round_robin(source)
        if skip:
            # a batch sampler of its own kind can only be played through to the position
            for number, batch in zip(range(skip), batches):
                if number < keep:
                    self.skipped_first.append(batch)
        yield from batches

    def _from_indices(self, indices: list[int], size: int, drop_last: bool, skip: int) -> Iterator[list[int]]:
        """This process's batches of a plain ``BatchSampler`` over ``indices``, without its first
        ``skip``: every process takes one global batch per round (one piece of each with
        ``split_batches``), and only the last round can leave a process out, so the ``skip``
        rounds before the position are jumped over; the epoch's first indices, which complete a
        short last round, are taken from ``indices`` directly."""
        n = self.num_processes
        if n == 1:
            return _sliced_batches(indices, size, drop_last, first=skip)
        if self.split_batches:
            return self._split(_sliced_batches(indices, size, drop_last, first=skip), start=indices[:size])
        return self._round_robin(_sliced_batches(indices, size, drop_last, first=skip * n), start=indices[:n * size])

    def _round_robin(self, source: Iterator[list[int]], start: list[int] | None = None) -> Iterator[list[int]]:
        n, me, size = self.num_processes, self.process_index, self.batch_size
        # the first indices of the epoch, to complete the last round (given when ``source``
        # does not begin at the epoch's start)
        start = [] if start is None else list(start)
        first_batches: list[list[int]] = []  # without a batch size, the last round is completed by batches
        pending: list[list[int]] = []
        for batch in source:
            if size is None and len(first_batches) < n:
                first_batches.append(batch)
            if size is not None and len(start) < n * size:
                start.extend(batch[: n * size - len(start)])
            pending.append(batch)
            if len(pending) < n:
                continue
            if self.even_batches and size is not None and sum(map(len, pending)) != n * size:
                yield self._even_share(pending, start)
            else:
                yield pending[me]
            pending = []
        if not pending or self.drop_last:
            return
        if self.even_batches and size is None:
            # batches of varying size: a process left out of the last round gets one of the
            # epoch's first batches (cycled), so every process gets as many batches
            yield pending[me] if me < len(pending) else first_batches[(me - len(pending)) % len(first_batches)]
        elif self.even_batches:
            yield self._even_share(pending, start)
        elif me < len(pending):
            yield pending[me]

    def _even_share(self, pending: list[list[int]], start: list[int]) -> list[int]:
        size, me = self.batch_size, self.process_index
        flat = fill_round([i for b in pending for i in b], self.num_processes * size, start)
        return flat[me * size:(me + 1) * size]

    def _split(self, source: Iterator[list[int]], start: list[int] | None = None) -> Iterator[list[int]]:
        n, me, size = self.num_processes, self.process_index, self.batch_size
        start = [] if start is None else list(start)
        for batch in source:
            if size is not None and len(start) < size:
                start.extend(batch[: size - len(start)])
            if size is not None and len(batch) == size:
                share = size // n
            elif self.even_batches:
                batch = fill_round(batch, size, start)
                share = size // n
            elif size is not None:
                # a short last batch is cut as a full one would be: the first processes get
                # full pieces and the later ones what is left, possibly nothing
                share = size // n
            else:
                share = math.ceil(len(batch) / n)
            mine = batch[me * share:(me + 1) * share]
            if mine:
                yield mine


class _Unbatched:
    """Turns batches of one index into single indices (for loaders without batching)."""

    def __init__(self, batch_sampler: BatchSamplerShard) -> None:
        self.batch_sampler = batch_sampler

    def __iter__(self) -> Iterator[int]:
        for batch in self.batch_sampler:
            yield batch[0]

    def __len__(self) -> int:
        return len(self.batch_sampler)


class IterableDatasetShard(IterableDataset):
    """The samples of an iterable dataset that belong to one process.

    The dataset is read in rounds of ``batch_size * num_processes`` samples (``batch_size``
    with ``split_batches``), and each process keeps its contiguous slice of every round. The
    last, incomplete round is dropped with ``drop_last``, and otherwise completed with samples
    from the start (``even_batches``, the default) so every process gets as many samples.

    Args:
        dataset: the iterable dataset (every process must read the same samples).
        batch_size: the batch size of each process, or of the whole round with ``split_batches``.
        drop_last: drop the last incomplete round.
        num_processes: how many processes share the dataset.
        process_index: which of them this is.
        split_batches: ``batch_size`` is the size of the whole round.
        even_batches: complete the last round (otherwise the processes get what is left).

    With two processes and samples ``0..7`` in batches of 4, process 0 gets ``0, 1, 2, 3`` and
    process 1 ``4, 5, 6, 7``; with ``split_batches``, process 0 gets ``0, 1, 4, 5``.
    """

    def __init__(self, dataset: Any, batch_size: int = 1, drop_last: bool = False, num_processes: int = 1,
                 process_index: int = 0, split_batches: bool = False, even_batches: bool = True) -> None:
        if split_batches and batch_size > 1 and batch_size % num_processes != 0:
            raise ConfigError(
                f"split_batches=True needs a batch size that is a round multiple of the number of processes; "
                f"got batch size {batch_size} for {num_processes} processes")
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.epoch = 0
        # Set for a pass that starts mid-epoch from the dataset's own state (see
        # .stream_position): the dataset's state at an epoch's start, from which the epoch's
        # first round is read again if a short last round needs completing.
        self.restart_state: Any = None

    @property
    def round_size(self) -> int:
        """How many samples of the dataset one round covers (all processes together)."""
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    @property
    def process_batch_size(self) -> int:
        return self.batch_size // self.num_processes if self.split_batches else self.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        rounds = len(self.dataset) / self.round_size
        rounds = math.floor(rounds) if self.drop_last else math.ceil(rounds)
        return rounds * self.process_batch_size

    def __iter__(self) -> Iterator[Any]:
        size, share = self.round_size, self.process_batch_size
        mine = slice(self.process_index * share, (self.process_index + 1) * share)
        restart, self.restart_state = self.restart_state, None
        start: list[Any] = []
        current: list[Any] = []
        for sample in self.dataset:
            current.append(sample)
            if len(current) == size:
                if not start and restart is None:  # a resumed pass's first round is not the epoch's
                    start = current
                yield from current[mine]
                current = []
        if not current or self.drop_last:
            return
        if self.even_batches:
            if not start and restart is not None:
                start = self._first_round(restart)
            current = fill_round(current, size, start or list(current))
        yield from current[mine]

    def _first_round(self, restart: Any) -> list[Any]:
        """The epoch's first round, read again from the dataset's state ``restart`` (a pass
        resumed mid-epoch did not read it, and a short last round is completed with it)."""
        self.dataset.load_state_dict(restart)
        return list(itertools.islice(iter(self.dataset), self.round_size))


class SkipBatchSampler(BatchSampler):
    """``batch_sampler`` without its first ``skip_batches`` batches (at every pass)."""

    def __init__(self, batch_sampler: Any, skip_batches: int = 0) -> None:
        self.batch_sampler = batch_sampler
        self.skip_batches = skip_batches
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = getattr(batch_sampler, "drop_last", False)

    @property
    def sampler(self) -> Any:
        return getattr(self.batch_sampler, "sampler", None)

    @property
    def total_length(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[int]]:
        for number, batch in enumerate(self.batch_sampler):
            if number >= self.skip_batches:
                yield batch

    def __len__(self) -> int:
        return max(len(self.batch_sampler) - self.skip_batches, 0)


class SkipDataLoader(StatefulVariants, DataLoader):
    """A ``DataLoader`` that leaves out its first ``skip_batches`` batches at every pass
    (with ``use_stateful_dataloader=True``, a torchdata ``StatefulDataLoader``)."""

    def __init__(self, dataset: Any, skip_batches: int = 0, use_stateful_dataloader: bool = False, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.skip_batches = skip_batches
        self.use_stateful_dataloader = use_stateful_dataloader

    def __iter__(self) -> Iterator[Any]:
        for number, batch in enumerate(super().__iter__()):
            if number >= self.skip_batches:
                yield batch

    def __len__(self) -> int:
        return max(super().__len__() - self.skip_batches, 0)
