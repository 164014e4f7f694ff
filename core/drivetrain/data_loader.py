"""Data loaders split across processes: sharding, dispatching, device placement and resuming.

:func:`prepare_data_loader` turns a user's ``torch.utils.data.DataLoader`` into one of two
loaders, both ``DataLoader`` subclasses:

- :class:`DataLoaderShard`: every process reads its own share. A map-style dataset is split
  by batches (:class:`BatchSamplerShard`), an iterable one by samples
  (:class:`IterableDatasetShard`).
- :class:`DataLoaderDispatcher`: the main process reads every batch and each process receives
  its slice (the default for iterable datasets whose batches go to a device).

Both tell :class:`~drivetrain.state.GradientState` when the last batch is out and how many
samples of it are real (``end_of_dataloader`` and ``remainder``, which ``gather_for_metrics``
uses to drop the samples repeated to even out the last batch), and both know their position:
``state_dict()`` / ``load_state_dict()`` save and restore the epoch and the number of batches
already handed out, so a resumed run continues with the next unseen batch.

Shuffling never draws from the global torch generator: a shuffling sampler gets its own
generator, seeded with ``seed + epoch`` at the start of each epoch, where ``seed`` is
``data_seed`` when given and otherwise the initial seed of the user's generator or of torch
(``set_seed`` makes it reproducible). Process 0's seed is adopted by every process before the
first epoch, so all of them shuffle alike and their shards never overlap.
"""

from __future__ import annotations

import copy
import inspect
import logging
import math
from collections.abc import Mapping
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from .errors import ConfigError
from .state import GradientState, PartialState
from .utils.operations import (
    broadcast_object_list,
    find_batch_size,
    get_data_structure,
    honor_type,
    is_tensor_information,
    recursively_apply,
    send_to_device,
    slice_tensors,
)
from .utils.operations import _as_device, _send
from .utils.random import synchronize_rng_states

logger = logging.getLogger(__name__)

STATE_FORMAT = 1

# DataLoader arguments copied from the user's loader to the prepared one (the sampling ones
# are replaced, ``generator`` becomes the loader's own).
_SAMPLING_ARGUMENTS = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last", "generator")


def _loader_arguments(dataloader: DataLoader) -> dict[str, Any]:
    names = [name for name in inspect.signature(DataLoader.__init__).parameters if name != "self"]
    return {name: getattr(dataloader, name) for name in names
            if name not in _SAMPLING_ARGUMENTS and hasattr(dataloader, name)}


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


def _tensors_of(data: Any) -> Iterator[torch.Tensor]:
    if isinstance(data, torch.Tensor):
        yield data
    elif isinstance(data, Mapping):
        for value in data.values():
            yield from _tensors_of(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            yield from _tensors_of(value)


def _mix(*numbers: int) -> int:
    """A 63-bit seed from several integers (stable across runs and processes)."""
    value = 0x2545F4914F6CDD1D
    for number in numbers:
        value = (value * 6364136223846793005 + int(number) + 1442695040888963407) % 2**64
    return value % 2**63


# ------------------------------------------------------------------------ samplers


class SeedableRandomSampler(RandomSampler):
    """A ``RandomSampler`` whose order depends only on a seed and the epoch.

    Epoch ``e`` is shuffled with a private generator seeded with ``initial_seed + e``, so
    every process that shares the seed draws the same order, a run is reproducible, and
    the global torch generator is left alone. The epoch moves on by one after each full
    pass, or is set with :meth:`set_epoch`.

    Args:
        data_seed: the seed (default: ``torch.initial_seed()``, which ``set_seed`` fixes).
        *args, **kwargs: those of ``RandomSampler``; a ``generator`` given is not used.
    """

    def __init__(self, *args: Any, data_seed: int | None = None, **kwargs: Any) -> None:
        kwargs.pop("generator", None)
        super().__init__(*args, **kwargs)
        self.initial_seed = data_seed if data_seed is not None else torch.initial_seed()
        self.epoch = 0
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


def _all_indices(sampler: Any) -> list[int]:
    """Every index ``sampler`` yields in one pass, as a list.

    A ``RandomSampler`` with its own generator gives the permutation it would yield, drawn
    in one call (its ``__iter__`` hands the indices out one by one through Python).
    """
    if (type(sampler) is RandomSampler and not sampler.replacement and sampler.generator is not None
            and sampler.num_samples == len(sampler.data_source)):
        return torch.randperm(len(sampler.data_source), generator=sampler.generator).tolist()
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
                f"split_batches=True needs a batch size that is a multiple of the number of processes; "
                f"got batch size {self.batch_size} for {num_processes} processes (make it a multiple, "
                f"or use split_batches=False)")
        if self.batch_size is None and even_batches and num_processes > 1:
            raise ConfigError("this batch sampler has no batch_size, so batches cannot be evened out across "
                              "processes; use even_batches=False (DataLoaderConfiguration(even_batches=False))")
        self._skip_next = 0

    @property
    def sampler(self) -> Any:
        return getattr(self.batch_sampler, "sampler", None)

    def skip_next(self, num_batches: int) -> None:
        """Leave out this process's first ``num_batches`` batches of the next pass only."""
        self._skip_next = num_batches

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
            return batches - 1 if last and self.process_index * math.ceil(last / n) >= last else batches
        rounds, extra = divmod(batches, n)
        if extra == 0 or self.drop_last:
            return rounds
        if self.even_batches:
            return rounds + 1
        return rounds + (1 if self.process_index < extra else 0)

    def __iter__(self) -> Iterator[list[int]]:
        skip, self._skip_next = self._skip_next, 0
        inner = self.batch_sampler
        if type(inner) is BatchSampler and hasattr(type(inner.sampler), "__len__"):
            # A plain BatchSampler: read its indices at once and cut this process's batches out
            # directly (the same batches as below, at a fraction of the cost per batch).
            batches = self._cut(_all_indices(inner.sampler), inner.batch_size, inner.drop_last)
        elif self.num_processes == 1:
            batches = iter(inner)
        elif self.split_batches:
            batches = self._split()
        else:
            batches = self._round_robin()
        if skip:
            for _ in zip(range(skip), batches):
                pass
        yield from batches

    def _cut(self, indices: list[int], size: int, drop_last: bool) -> Iterator[list[int]]:
        """This process's batches of a plain ``BatchSampler`` over ``indices``."""
        n, me, total = self.num_processes, self.process_index, len(indices)
        if n == 1:
            end = total - total % size if drop_last else total
            yield from (indices[i:i + size] for i in range(0, end, size))
            return
        step, share = (size, size // n) if self.split_batches else (n * size, size)
        steps = total // step
        offset = me * share
        for begin in range(offset, steps * step, step):
            yield indices[begin:begin + share]
        tail = indices[steps * step:]
        if not tail or drop_last:
            return
        if self.even_batches:
            yield self._filled(tail, step, indices[:step])[offset:offset + share]
            return
        if self.split_batches:
            share = math.ceil(len(tail) / n)
            offset = me * share
        mine = tail[offset:offset + share]
        if mine:
            yield mine

    @staticmethod
    def _filled(indices: list[int], target: int, start: list[int]) -> list[int]:
        """``indices`` completed to ``target`` items with the epoch's first indices, cycled."""
        filled = list(indices)
        while len(filled) < target and start:
            filled.extend(start[: target - len(filled)])
        return filled

    def _round_robin(self) -> Iterator[list[int]]:
        n, me, size = self.num_processes, self.process_index, self.batch_size
        start: list[int] = []  # the first indices of the epoch, to complete the last round
        pending: list[list[int]] = []
        for batch in self.batch_sampler:
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
        if self.even_batches:
            yield self._even_share(pending, start)
        elif me < len(pending):
            yield pending[me]

    def _even_share(self, pending: list[list[int]], start: list[int]) -> list[int]:
        size, me = self.batch_size, self.process_index
        flat = self._filled([i for b in pending for i in b], self.num_processes * size, start)
        return flat[me * size:(me + 1) * size]

    def _split(self) -> Iterator[list[int]]:
        n, me, size = self.num_processes, self.process_index, self.batch_size
        start: list[int] = []
        for batch in self.batch_sampler:
            if size is not None and len(start) < size:
                start.extend(batch[: size - len(start)])
            if size is not None and len(batch) == size:
                share = size // n
            elif self.even_batches:
                batch = self._filled(batch, size, start)
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
                f"split_batches=True needs a batch size that is a multiple of the number of processes; "
                f"got batch size {batch_size} for {num_processes} processes")
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.epoch = 0

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
        start: list[Any] = []
        current: list[Any] = []
        for sample in self.dataset:
            current.append(sample)
            if len(current) == size:
                if not start:
                    start = current
                yield from current[mine]
                current = []
        if not current or self.drop_last:
            return
        if self.even_batches:
            source = start or list(current)
            while len(current) < size:
                current.extend(source[: size - len(current)])
        yield from current[mine]


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


class SkipDataLoader(DataLoader):
    """A ``DataLoader`` that leaves out its first ``skip_batches`` batches at every pass."""

    def __init__(self, dataset: Any, skip_batches: int = 0, use_stateful_dataloader: bool = False, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.skip_batches = skip_batches

    def __iter__(self) -> Iterator[Any]:
        for number, batch in enumerate(super().__iter__()):
            if number >= self.skip_batches:
                yield batch

    def __len__(self) -> int:
        return max(super().__len__() - self.skip_batches, 0)


# ------------------------------------------------------------- position and seeds


class _Progress:
    """Where a prepared loader stands and how it shuffles; shared with the loaders that
    :func:`skip_first_batches` derives from it, so they all advance one position."""

    def __init__(self, seed: int, num_processes: int, process_index: int, generators: list[torch.Generator],
                 seedable: list[SeedableRandomSampler], epoch_followers: list[Any], agree_on_seed: bool) -> None:
        self.epoch = 0
        self.batches_yielded = 0
        # True: the next pass plays ``epoch`` from batch ``batches_yielded`` (fresh start, or
        # restored / set position). False: a pass of ``epoch`` began, the next one is epoch + 1.
        self.fresh = True
        self.seed = seed
        self.num_processes = num_processes
        self.process_index = process_index
        self.generators = generators
        self.seedable = seedable
        self.epoch_followers = epoch_followers
        self.seed_agreed = not agree_on_seed
        self.loader_generator = torch.Generator()

    def agree_on_seed(self) -> None:
        """Adopt process 0's seed (once, the first time the loader is iterated)."""
        if self.seed_agreed:
            return
        self.seed_agreed = True
        collectives = PartialState().collectives
        if collectives.world_size > 1 and collectives.world_size == self.num_processes:
            self.seed = broadcast_object_list([self.seed])[0]

    def begin_pass(self) -> tuple[int, int]:
        """Start a pass: returns (epoch, batches to skip) and seeds everything for the epoch."""
        if not self.fresh:
            self.epoch += 1
            self.batches_yielded = 0
        self.fresh = False
        skip = self.batches_yielded
        self.apply_epoch(self.epoch)
        return self.epoch, skip

    def apply_epoch(self, epoch: int) -> None:
        for generator in self.generators:
            generator.manual_seed(self.seed + epoch)
        for sampler in self.seedable:
            sampler.initial_seed = self.seed
            sampler.set_epoch(epoch)
        for follower in self.epoch_followers:
            follower.set_epoch(epoch)
        self.loader_generator.manual_seed(_mix(self.seed, epoch, self.process_index))

    def finish_pass(self) -> None:
        self.epoch += 1
        self.batches_yielded = 0
        self.fresh = True

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch or not self.fresh:
            self.epoch, self.batches_yielded, self.fresh = epoch, 0, True
        self.apply_epoch(epoch)


class DataLoaderStateMixin:
    """The contract between a data loader and :class:`~drivetrain.state.GradientState`.

    A loader calls :meth:`begin` when a pass starts and :meth:`end` when it stops; in
    between, ``GradientState`` knows a loader is running, so gradients synchronise on its
    last batch (``end_of_dataloader``), and ``remainder`` says how many samples of that last
    batch are real (``-1``: unknown or none padded).
    """

    end_of_dataloader: bool = False
    remainder: int = -1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        cls.end_of_dataloader = False
        cls.remainder = -1
        super().__init_subclass__(**kwargs)

    def reset(self) -> None:
        self.end_of_dataloader = False
        self.remainder = -1

    def begin(self) -> None:
        self.reset()
        self.remainder = self._last_batch_real_samples()
        if not hasattr(self, "gradient_state"):
            self.gradient_state = GradientState()
        self.gradient_state._add_dataloader(self)

    def end(self) -> None:
        self.gradient_state._remove_dataloader(self)

    def _last_batch_real_samples(self) -> int:
        return -1


class DataLoaderAdapter:
    """Wraps a data loader (a ``torch`` ``DataLoader`` or a stateful one, such as
    ``torchdata``'s ``StatefulDataLoader``) and behaves as it: attributes, iteration and
    length come from the wrapped loader, and ``isinstance`` checks see its class.

    Args:
        dataset: the dataset of the loader to build.
        use_stateful_dataloader: build ``torchdata.stateful_dataloader.StatefulDataLoader``
            (its position is saved by its own ``state_dict``).
        batch_sampler: passed on to the loader.
        **kwargs: the other ``DataLoader`` arguments.
    """

    def __init__(self, dataset: Any, use_stateful_dataloader: bool = False, batch_sampler: Any = None,
                 **kwargs: Any) -> None:
        self.use_stateful_dataloader = use_stateful_dataloader
        if use_stateful_dataloader:
            try:
                from torchdata.stateful_dataloader import StatefulDataLoader
            except ImportError:
                raise ConfigError("use_stateful_dataloader=True needs torchdata 0.8 or newer: "
                                  "pip install 'torchdata>=0.8'") from None
            self.base_dataloader = StatefulDataLoader(dataset, batch_sampler=batch_sampler, **kwargs)
        else:
            self.base_dataloader = DataLoader(dataset, batch_sampler=batch_sampler, **kwargs)
        if hasattr(self.base_dataloader, "state_dict"):
            self.dl_state_dict = self.base_dataloader.state_dict()

    def __getattr__(self, name: str) -> Any:
        if name == "base_dataloader":
            raise AttributeError(name)
        return getattr(self.base_dataloader, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.base_dataloader)

    def __len__(self) -> int:
        return len(self.base_dataloader)

    def state_dict(self) -> dict[str, Any]:
        return self.dl_state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base_dataloader.load_state_dict(state_dict)

    def _update_state_dict(self) -> None:
        # a stateful loader's position, taken where a batch was handed to the user
        if hasattr(self.base_dataloader, "state_dict"):
            self.dl_state_dict = self.base_dataloader.state_dict()

    @property
    def __class__(self) -> type:  # type: ignore[override]
        # `isinstance(prepared, DataLoader)` holds, as for the loader it wraps
        return self.base_dataloader.__class__


class _PreparedLoader(DataLoaderStateMixin):
    """What both prepared loaders share: the end-of-data signal, position and epoch."""

    _progress: _Progress
    _shard_sampler: BatchSamplerShard | None
    skip_batches: int

    def _init_state(self, progress: _Progress, skip_batches: int, drop_last: bool, non_blocking: bool,
                    use_stateful_dataloader: bool, construction: dict[str, Any]) -> None:
        self.gradient_state = GradientState()
        self.end_of_dataloader = False
        self.remainder = -1
        self._progress = progress
        self.skip_batches = skip_batches
        self._drop_last = drop_last
        self._non_blocking = non_blocking
        self.use_stateful_dataloader = use_stateful_dataloader
        self._construction = construction  # how to build a sibling (skip_first_batches)

    def __len__(self) -> int:
        return max(DataLoader.__len__(self) - self.skip_batches, 0)

    # --- epochs and position
    @property
    def iteration(self) -> int:
        """The epoch of the pass in progress (or of the next one)."""
        return self._progress.epoch

    def set_epoch(self, epoch: int) -> None:
        """Play epoch ``epoch`` next (its shuffle); forwarded to samplers and datasets that
        have ``set_epoch``."""
        self._progress.set_epoch(epoch)

    def _begin_pass(self) -> int:
        """Seeds and epoch for a new pass; returns how many batches to leave out first."""
        progress = self._progress
        progress.agree_on_seed()
        _epoch, resume = progress.begin_pass()
        if self.skip_batches:  # an explicit skip_first_batches replaces a restored position
            progress.batches_yielded = self.skip_batches
            return self.skip_batches
        return resume

    def state_dict(self) -> dict[str, Any]:
        """The position: epoch, batches already handed out in it, and the shuffling seed."""
        progress = self._progress
        return {
            "format": STATE_FORMAT,
            "epoch": progress.epoch,
            "batches_yielded": progress.batches_yielded,
            "seed": progress.seed,
            "total_batch_size": self.total_batch_size,
            "num_processes": progress.num_processes,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved position: the next pass resumes at the next unseen batch."""
        missing = {"epoch", "batches_yielded", "seed"} - set(state_dict)
        if missing:
            raise ConfigError(f"not a drivetrain data loader state (missing {sorted(missing)}); it was saved by "
                              f"another kind of data loader")
        if state_dict.get("format", STATE_FORMAT) > STATE_FORMAT:
            raise ConfigError(f"this data loader state has format {state_dict['format']}, newer than this "
                              f"drivetrain reads ({STATE_FORMAT}); upgrade drivetrain")
        progress = self._progress
        batches = int(state_dict["batches_yielded"])
        saved_total = state_dict.get("total_batch_size")
        total = self.total_batch_size
        if saved_total and total and saved_total != total:
            samples = batches * saved_total
            batches = samples // total
            if samples % total:
                logger.warning("the data loader state was saved with %d samples per step and this loader has %d; "
                               "resuming after %d batches (%d samples were seen, %d are replayed)",
                               saved_total, total, batches, samples, samples - batches * total)
        progress.epoch = int(state_dict["epoch"])
        progress.batches_yielded = batches
        progress.fresh = True
        progress.seed = int(state_dict["seed"])
        progress.seed_agreed = True
        progress.apply_epoch(progress.epoch)

    @property
    def total_batch_size(self) -> int | None:
        raise NotImplementedError

    @property
    def total_dataset_length(self) -> int | None:
        dataset = self.dataset.dataset if isinstance(self.dataset, IterableDatasetShard) else self.dataset
        try:
            return len(dataset)
        except (TypeError, NotImplementedError):
            return None


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
        use_stateful_dataloader: accepted for compatibility; every prepared loader has
            ``state_dict``/``load_state_dict``.
        **kwargs: the ``DataLoader`` arguments.
    """

    def __init__(self, dataset: Any, device: Any = None, rng_types: list[str] | None = None,
                 synchronized_generator: torch.Generator | None = None, skip_batches: int = 0,
                 use_stateful_dataloader: bool = False, _drop_last: bool = False, _non_blocking: bool = False,
                 *, _progress: _Progress | None = None, _shard_sampler: BatchSamplerShard | None = None,
                 **kwargs: Any) -> None:
        construction = dict(dataset=dataset, device=device, rng_types=rng_types,
                            synchronized_generator=synchronized_generator,
                            use_stateful_dataloader=use_stateful_dataloader, _drop_last=_drop_last,
                            _non_blocking=_non_blocking, _shard_sampler=_shard_sampler, **kwargs)
        if _progress is None:
            _progress = _Progress(torch.initial_seed(), 1, 0, [], [], [], agree_on_seed=False)
        kwargs["generator"] = _progress.loader_generator
        super().__init__(dataset, **kwargs)
        self.device = device
        self.rng_types = rng_types
        self.synchronized_generator = synchronized_generator
        self._shard_sampler = _shard_sampler
        construction["_progress"] = _progress
        self._init_state(_progress, skip_batches, _drop_last, _non_blocking, use_stateful_dataloader, construction)

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

    def __iter__(self) -> Iterator[Any]:
        if self.rng_types:
            types = [t for t in self.rng_types if str(t) != "generator" or self.synchronized_generator is not None]
            synchronize_rng_states(types, self.synchronized_generator)
        skip = self._begin_pass()
        self.begin()
        try:
            discard = skip
            if skip and self._shard_sampler is not None:
                self._shard_sampler.skip_next(skip)
                discard = 0
            iterator = super().__iter__()
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
            progress.finish_pass()
            return
        while True:
            if device is not None:
                current = _send(current, device, non_blocking, [])
            try:
                upcoming = next(iterator)
            except StopIteration:
                self.end_of_dataloader = True
                progress.batches_yielded += 1
                yield current
                break
            progress.batches_yielded += 1
            yield current
            current = upcoming
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
        device: where batches go (default: the process's device, where they are received).
        even_batches: complete the last batch as described above.
        **kwargs: the ``DataLoader`` arguments.
    """

    def __init__(self, dataset: Any, split_batches: bool = False, skip_batches: int = 0,
                 use_stateful_dataloader: bool = False, _drop_last: bool = False, _non_blocking: bool = False,
                 slice_fn: Callable | None = None, *, device: Any = None, even_batches: bool = True,
                 _progress: _Progress | None = None, _shard_sampler: BatchSamplerShard | None = None,
                 **kwargs: Any) -> None:
        construction = dict(dataset=dataset, split_batches=split_batches,
                            use_stateful_dataloader=use_stateful_dataloader, _drop_last=_drop_last,
                            _non_blocking=_non_blocking, slice_fn=slice_fn, device=device,
                            even_batches=even_batches, _shard_sampler=_shard_sampler, **kwargs)
        state = PartialState()
        if _progress is None:
            _progress = _Progress(torch.initial_seed(), state.num_processes, state.process_index, [], [], [],
                                  agree_on_seed=False)
        kwargs["generator"] = _progress.loader_generator
        super().__init__(dataset, **kwargs)
        self.split_batches = split_batches
        self.slice_fn = slice_fn or slice_tensors
        self.device = device
        self.even_batches = even_batches
        self.state = state
        self._shard_sampler = _shard_sampler
        construction["_progress"] = _progress
        self._init_state(_progress, skip_batches, _drop_last, _non_blocking, use_stateful_dataloader, construction)

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

    def _share(self, batch: Any, first: Any, is_last: bool) -> tuple[Any, int]:
        """The batch to send out (``None``: drop it) and, when padded, how many samples are real."""
        if not is_last:
            return batch, 0
        n = self.state.num_processes
        size = _batch_size(batch)
        full = self.total_batch_size
        if self._drop_last and full is not None and size < full:
            return None, 0
        if size % n == 0 or not self.even_batches:
            return batch, 0
        target = math.ceil(size / n) * n
        parts, have = [batch], size
        while have < target:
            parts.append(first)
            have += _batch_size(first)
        return slice_tensors(_join(parts), slice(0, target)), size

    def __iter__(self) -> Iterator[Any]:
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
        if main:
            if skip and self._shard_sampler is not None:
                self._shard_sampler.skip_next(skip * (1 if self.split_batches else state.num_processes))
                skip_reads = 0
            else:
                skip_reads = skip
            iterator = super().__iter__()
            for _ in range(skip_reads):
                self._fetch(iterator)
        first = None
        current, have_current = self._fetch(iterator) if main else (None, False)
        while True:
            message = None
            if main:
                upcoming, have_upcoming = self._fetch(iterator) if have_current else (None, False)
                if first is None and have_current:
                    first = current
                payload, real = self._share(current, first, not have_upcoming) if have_current else (None, 0)
                if payload is None:
                    have_current = False
                # [layout of this batch, is it the last, real samples if padded, size of the next one]
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
                yield piece
            if is_last:
                break
            if main:
                current, have_current = upcoming, have_upcoming
        progress.finish_pass()

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


# ----------------------------------------------------------------------- prepare


def get_sampler(dataloader: DataLoader) -> Any:
    """The sampler of indices behind ``dataloader`` (inside its batch sampler, if any)."""
    if isinstance(dataloader.sampler, BatchSampler):
        return dataloader.sampler.sampler
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    return getattr(batch_sampler, "sampler", None) if batch_sampler is not None else dataloader.sampler


def _base_seed(sampler: Any, data_seed: int | None) -> int:
    if data_seed is not None:
        return int(data_seed)
    generator = getattr(sampler, "generator", None)
    if isinstance(generator, torch.Generator):
        return generator.initial_seed()
    return torch.initial_seed()


def _own_shuffling(sampler: Any, use_seedable_sampler: bool, seed: int, generators: list[torch.Generator],
                   seedable: list[SeedableRandomSampler]) -> Any:
    """A copy of ``sampler`` that shuffles with a generator the loader seeds per epoch."""
    if use_seedable_sampler and type(sampler) is RandomSampler:
        replacement = SeedableRandomSampler(data_source=sampler.data_source, replacement=sampler.replacement,
                                            num_samples=sampler._num_samples, data_seed=seed)
        seedable.append(replacement)
        return replacement
    if isinstance(sampler, SeedableRandomSampler):
        seedable.append(sampler)
        return sampler
    if hasattr(sampler, "generator"):
        replacement = copy.copy(sampler)
        replacement.generator = torch.Generator()
        generators.append(replacement.generator)
        return replacement
    return sampler


def _rebuild_batch_sampler(batch_sampler: Any, use_seedable_sampler: bool, seed: int,
                           generators: list[torch.Generator], seedable: list[SeedableRandomSampler]) -> Any:
    if type(batch_sampler) is BatchSampler:
        sampler = _own_shuffling(batch_sampler.sampler, use_seedable_sampler, seed, generators, seedable)
        return BatchSampler(sampler, batch_sampler.batch_size, batch_sampler.drop_last)
    rebuilt = batch_sampler
    if hasattr(batch_sampler, "generator") or hasattr(getattr(batch_sampler, "sampler", None), "generator"):
        rebuilt = copy.copy(batch_sampler)
        if hasattr(rebuilt, "generator"):
            rebuilt.generator = torch.Generator()
            generators.append(rebuilt.generator)
        if hasattr(getattr(rebuilt, "sampler", None), "generator"):
            rebuilt.sampler = _own_shuffling(rebuilt.sampler, use_seedable_sampler, seed, generators, seedable)
    return rebuilt


def prepare_data_loader(
    dataloader: DataLoader,
    device: Any = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: list[str] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Callable | None = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
) -> DataLoader:
    """A loader that yields only this process's share of ``dataloader``'s data.

    Args:
        dataloader: the loader to split; every process must build the same one.
        device: where batches go when ``put_on_device``.
        num_processes: how many processes share the data (default: the run's).
        process_index: this process's index (default: the run's).
        split_batches: cut each batch of ``dataloader`` across the processes (the observed
            batch size stays the same; it must be a multiple of ``num_processes``), instead of
            giving each process whole batches (the observed batch size is multiplied by
            ``num_processes``).
        put_on_device: move batches (nested lists, tuples and dicts of tensors) to ``device``.
        rng_types: generators synchronised from process 0 at the start of each pass:
            ``"torch"``, ``"generator"`` (an iterable dataset's ``generator``) or the
            platform's name.
        dispatch_batches: the main process reads and sends out every batch. Default: on for
            an iterable dataset whose batches go to a device, off otherwise.
        even_batches: complete the last batches with samples from the start so every
            process gets as many batches of the same size (``gather_for_metrics`` drops the
            repeated samples again); off: some processes get fewer.
        slice_fn_for_dispatch: how a dispatched batch is cut (see :class:`DataLoaderDispatcher`).
        use_seedable_sampler: replace a ``RandomSampler`` with a :class:`SeedableRandomSampler`.
        data_seed: the shuffling seed (default: the initial seed of the loader's generator, or
            of torch).
        non_blocking: asynchronous copies to the device.
        use_stateful_dataloader: accepted for compatibility: every prepared loader can save and
            restore its position with ``state_dict``/``load_state_dict``.
    """
    if dispatch_batches is None:
        dispatch_batches = bool(put_on_device) and isinstance(dataloader.dataset, IterableDataset)
    if dispatch_batches and not put_on_device:
        raise ConfigError("dispatch_batches=True sends batches to the processes' devices and needs "
                          "put_on_device=True (or set dispatch_batches=False)")
    if num_processes is None or process_index is None:
        state = PartialState()
        num_processes = state.num_processes if num_processes is None else num_processes
        process_index = state.process_index if process_index is None else process_index
    dataset = dataloader.dataset
    iterable = isinstance(dataset, IterableDataset)
    batch_size = dataloader.batch_size
    if batch_size is None and dataloader.batch_sampler is not None:
        batch_size = getattr(dataloader.batch_sampler, "batch_size", None)
    if isinstance(dataloader.sampler, BatchSampler):
        batch_size = dataloader.sampler.batch_size
    if split_batches and batch_size is not None and batch_size % num_processes != 0:
        raise ConfigError(f"split_batches=True needs a batch size that is a multiple of the number of processes; "
                          f"got batch size {batch_size} for {num_processes} processes")

    arguments = _loader_arguments(dataloader)
    placement = device if put_on_device else None
    sampler = get_sampler(dataloader)
    seed = _base_seed(sampler, data_seed)
    generators: list[torch.Generator] = []
    seedable: list[SeedableRandomSampler] = []
    followers: list[Any] = [dataset] if hasattr(dataset, "set_epoch") else []

    if iterable:
        progress = _Progress(seed, num_processes, process_index, generators, seedable, followers,
                             agree_on_seed=False)
        synchronized = getattr(dataset, "generator", None)
        if dispatch_batches:
            return DataLoaderDispatcher(
                dataset, split_batches=split_batches, use_stateful_dataloader=use_stateful_dataloader,
                _drop_last=dataloader.drop_last, _non_blocking=non_blocking, slice_fn=slice_fn_for_dispatch,
                device=placement, even_batches=even_batches, _progress=progress, batch_size=dataloader.batch_size,
                drop_last=dataloader.drop_last, **arguments)
        shard_dataset = dataset
        per_process = batch_size
        if num_processes > 1:
            shard_dataset = IterableDatasetShard(dataset, batch_size=batch_size or 1, drop_last=dataloader.drop_last,
                                                 num_processes=num_processes, process_index=process_index,
                                                 split_batches=split_batches, even_batches=even_batches)
            progress.epoch_followers = [shard_dataset]
            if batch_size is not None and split_batches:
                per_process = batch_size // num_processes
        return DataLoaderShard(
            shard_dataset, device=placement, rng_types=rng_types,
            synchronized_generator=synchronized if isinstance(synchronized, torch.Generator) else None,
            use_stateful_dataloader=use_stateful_dataloader, _drop_last=dataloader.drop_last,
            _non_blocking=non_blocking, _progress=progress, batch_size=per_process, drop_last=dataloader.drop_last,
            **arguments)

    # Map-style dataset: shard the batch sampler.
    sampler_is_batch_sampler = isinstance(dataloader.sampler, BatchSampler)
    unbatched = dataloader.batch_sampler is None and not sampler_is_batch_sampler
    if sampler_is_batch_sampler:
        inner = _rebuild_batch_sampler(dataloader.sampler, use_seedable_sampler, seed, generators, seedable)
    elif unbatched:
        inner = BatchSampler(_own_shuffling(dataloader.sampler, use_seedable_sampler, seed, generators, seedable),
                             1, False)
    else:
        inner = _rebuild_batch_sampler(dataloader.batch_sampler, use_seedable_sampler, seed, generators, seedable)
    for part in (getattr(inner, "sampler", None), inner):
        if part is not None and hasattr(part, "set_epoch") and not isinstance(part, SeedableRandomSampler):
            followers.append(part)
    progress = _Progress(seed, num_processes, process_index, generators, seedable, followers,
                         agree_on_seed=not dispatch_batches and num_processes > 1 and bool(generators or seedable))
    shards = 1 if dispatch_batches else num_processes
    shard = BatchSamplerShard(inner, num_processes=shards, process_index=0 if dispatch_batches else process_index,
                              split_batches=split_batches and not dispatch_batches,
                              even_batches=even_batches)
    if sampler_is_batch_sampler:
        sampling = {"sampler": shard, "batch_size": None}
    elif unbatched:
        sampling = {"sampler": _Unbatched(shard), "batch_size": None}
    else:
        sampling = {"batch_sampler": shard}
    if dispatch_batches:
        return DataLoaderDispatcher(
            dataset, split_batches=split_batches, use_stateful_dataloader=use_stateful_dataloader,
            _drop_last=dataloader.drop_last or bool(getattr(inner, "drop_last", False)), _non_blocking=non_blocking,
            slice_fn=slice_fn_for_dispatch, device=placement, even_batches=even_batches, _progress=progress,
            _shard_sampler=shard, **sampling, **arguments)
    return DataLoaderShard(
        dataset, device=placement, rng_types=rng_types, synchronized_generator=None,
        use_stateful_dataloader=use_stateful_dataloader, _drop_last=dataloader.drop_last, _non_blocking=non_blocking,
        _progress=progress, _shard_sampler=shard, **sampling, **arguments)


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
    """A loader like ``dataloader`` that leaves out its first ``num_batches`` batches.

    For a prepared loader, the new one shares the original's position and shuffling: it plays
    the epoch the original would play next (the restored one after ``load_state_dict``,
    whose own offset it replaces) from batch ``num_batches`` on, without loading the skipped
    batches of a map-style dataset; once it has run through, the original continues with the
    following epoch. A plain ``DataLoader`` gets a plain loader that skips at every pass.
    """
    if isinstance(dataloader, _PreparedLoader):
        construction = dict(dataloader._construction)
        return type(dataloader)(skip_batches=num_batches, **construction)
    dataset = dataloader.dataset
    arguments = _loader_arguments(dataloader)
    arguments["generator"] = dataloader.generator
    if isinstance(dataset, IterableDataset) or dataloader.batch_sampler is None:
        return SkipDataLoader(dataset, skip_batches=num_batches, batch_size=dataloader.batch_size,
                              sampler=None if isinstance(dataset, IterableDataset) else dataloader.sampler,
                              drop_last=dataloader.drop_last, **arguments)
    return DataLoader(dataset, batch_sampler=SkipBatchSampler(dataloader.batch_sampler, skip_batches=num_batches),
                      **arguments)


__all__ = [
    "prepare_data_loader", "skip_first_batches", "get_sampler", "SeedableRandomSampler", "BatchSamplerShard",
    "IterableDatasetShard", "DataLoaderShard", "DataLoaderDispatcher", "SkipBatchSampler", "SkipDataLoader",
    "DataLoaderStateMixin", "DataLoaderAdapter",
]
