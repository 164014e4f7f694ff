"""Where a prepared loader stands: epoch, batches handed out, shuffling seed; and the
contract with ``GradientState`` (``DataLoaderStateMixin``)."""

from __future__ import annotations

import logging
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader

from ...kernel.errors import ConfigError
from ...runtime.state import GradientState, PartialState
from ..cross_process import broadcast_object_list
from ..preemption import watched as preemption_checked

from .draws import EpochDraws
from .state_check import (check_position_state, check_same_dataset, check_stateful_state, check_within_epoch,
                          resumed_batches)
from .sharding import BatchSamplerShard, IterableDatasetShard, SeedableRandomSampler, _mix
from .stateful import StatefulVariants
from .stream_position import StreamPosition, warn_replay

logger = logging.getLogger("drivetrain.data_loader.progress")  # its name before the layers, kept for log filters

STATE_FORMAT = 1


# ------------------------------------------------------------- position and seeds


class _Progress:
    """Where a prepared loader stands and how it shuffles; shared with the loaders that
    :func:`skip_first_batches` derives from it, so they all advance one position."""

    def __init__(self, seed: int, num_processes: int, process_index: int, generators: list[torch.Generator],
                 seedable: list[SeedableRandomSampler], epoch_followers: list[Any], agree_on_seed: bool,
                 draws: EpochDraws | None = None) -> None:
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
        # None: the loader keeps the generator its user gave (see ``loader_generator_for``)
        self.loader_generator: torch.Generator | None = torch.Generator()
        # the numbers a plain DataLoader would draw at each pass (None: the loader draws nothing
        # from torch's generators and seeds its own per epoch)
        self.draws = draws
        # the own position of an iterable dataset that keeps one (set by the first loader built)
        self.stream: StreamPosition | None = None
        self.stream_checked = False

    def loader_generator_for(self, given: torch.Generator | None, use_stateful_dataloader: bool) -> Any:
        """The generator the loader is built with: its own, seeded per epoch; with
        ``use_stateful_dataloader``, the user's when one is given, as torchdata's
        ``StatefulDataLoader`` would use it (so their states agree)."""
        if use_stateful_dataloader and given is not None:
            self.loader_generator = None
            return given
        return self.loader_generator

    def agree_on_seed(self) -> None:
        """Adopt process 0's seed (once, the first time the loader is iterated)."""
        if self.seed_agreed:
            return
        self.seed_agreed = True
        state = PartialState()
        collectives = state.collectives
        # Every process holds a loader sharded as the run shards data (by process, or by
        # data-parallel rank when peers share batches), so all of them join the broadcast.
        if collectives.world_size > 1 and self.num_processes in (collectives.world_size, state.run.data_parallel_size):
            self.seed = broadcast_object_list([self.seed])[0]

    def begin_pass(self, new_iterator: bool = True) -> tuple[int, int]:
        """Start a pass: returns (epoch, batches to skip) and seeds everything for the epoch."""
        if not self.fresh:
            self.epoch += 1
            self.batches_yielded = 0
        self.fresh = False
        skip = self.batches_yielded
        self.apply_epoch(self.epoch)
        if self.draws is not None:
            self.draws.begin(self.epoch, self.loader_generator if new_iterator else None)
        return self.epoch, skip

    def apply_epoch(self, epoch: int) -> None:
        for generator in self.generators:
            generator.manual_seed(self.seed + epoch)
        for sampler in self.seedable:
            sampler.initial_seed = self.seed
            sampler.set_epoch(epoch)
        for follower in self.epoch_followers:
            follower.set_epoch(epoch)
        if self.loader_generator is not None and self.draws is None:
            self.loader_generator.manual_seed(_mix(self.seed, epoch, self.process_index))

    def finish_pass(self) -> None:
        self.epoch += 1
        self.batches_yielded = 0
        self.fresh = True

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch or not self.fresh:
            self.epoch, self.batches_yielded, self.fresh = epoch, 0, True
        self.apply_epoch(epoch)


def epoch_followers(dataset: Any, sampler: Any = None, batch_sampler: Any = None) -> list[Any]:
    """What :meth:`_Progress.apply_epoch` tells the epoch: the dataset, the batch sampler and
    the samplers that have ``set_epoch`` (each once)."""
    found: list[Any] = []
    for part in (dataset, batch_sampler, getattr(batch_sampler, "sampler", None), sampler):
        if part is not None and hasattr(part, "set_epoch") and not any(part is seen for seen in found):
            found.append(part)
    return found


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


class _PreparedLoader(StatefulVariants, DataLoaderStateMixin):
    """What both prepared loaders share: the end-of-data signal, position and epoch.

    With ``use_stateful_dataloader=True`` the loader is a torchdata ``StatefulDataLoader``
    (see :mod:`.stateful`) and its position is torchdata's: ``state_dict()`` is the state
    ``StatefulDataLoader`` had when the last batch was handed out (a prepared loader reads
    one batch ahead, to know which batch is the last).
    """

    # the position as of the last batch handed out: torchdata's state, or the iterable dataset's own
    _read_state: Any = None
    #: ``observer(batches, loader)`` wraps each pass's batches (the step monitor of
    #: ``MonitorKwargs`` sets it at prepare time, to time the waits); ``None``: the batches as they are
    batch_observer: Any = None

    _progress: _Progress
    _shard_sampler: BatchSamplerShard | None
    skip_batches: int

    def _init_state(self, progress: _Progress, skip_batches: int, drop_last: bool, non_blocking: bool,
                    use_stateful_dataloader: bool, construction: dict[str, Any], torch_device_mesh: Any,
                    shard_sampler: Any, iteration: int) -> None:
        """What both loaders keep beyond ``DataLoader``'s own state; ends at epoch ``iteration``."""
        self.torch_device_mesh = torch_device_mesh
        self._shard_sampler = shard_sampler
        construction["_progress"] = progress
        self.gradient_state = GradientState()
        self.end_of_dataloader = False
        self.remainder = -1
        self._progress = progress
        self.skip_batches = skip_batches
        self._drop_last = drop_last
        self._non_blocking = non_blocking
        self.use_stateful_dataloader = use_stateful_dataloader
        self._construction = construction  # how to build a sibling (skip_first_batches)
        if not progress.stream_checked:
            progress.stream_checked = True
            if self._stateful_base() is None:  # torchdata keeps the dataset's state itself
                progress.stream = StreamPosition.of(self.dataset, getattr(self, "num_workers", 0))
        if iteration:
            self.set_epoch(iteration)

    def __len__(self) -> int:
        return max(DataLoader.__len__(self) - self.skip_batches, 0)

    def __iter__(self) -> Iterator[Any]:
        # the loader's own pass (a generator: nothing runs yet), with the preemption check at
        # each step boundary when the run asked for one, then the step monitor's observer
        batches = preemption_checked(self._iterate(), self)
        observer = self.batch_observer
        return batches if observer is None else observer(batches, self)

    def _iterate(self) -> Iterator[Any]:
        raise NotImplementedError

    def _torch_iterator(self) -> Iterator[Any]:
        """``DataLoader``'s own iterator (torchdata's for a stateful loader): the class after
        this one in the loader's order, since this class's ``__iter__`` is the prepared pass."""
        return super().__iter__()  # type: ignore[misc]

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
        # persistent workers keep one iterator, which drew its base seed once, when it was made
        reused = bool(getattr(self, "persistent_workers", False) and getattr(self, "num_workers", 0)
                      and getattr(self, "_iterator", None) is not None)
        _epoch, resume = progress.begin_pass(new_iterator=not reused)
        if self.skip_batches:  # an explicit skip_first_batches replaces a restored position
            progress.batches_yielded = self.skip_batches
            return self.skip_batches
        return resume

    def _snapshot(self) -> Any:
        """torchdata's state now with ``use_stateful_dataloader``, else the iterable dataset's own
        state when it keeps one (else ``None``); taken after each read, handed out with the batch
        read (:meth:`_handed_out`): the loader reads one batch ahead."""
        base = self._stateful_base()
        if base is not None:
            return base.state_dict(self)
        stream = self._progress.stream
        return None if stream is None else stream.read()

    def _handed_out(self, snapshot: Any) -> None:
        self._read_state = snapshot

    def _resume_stream(self, skip: int) -> int:
        """How many batches of an iterable dataset to read and drop to resume after ``skip``:
        none when the dataset's own state was restored, else all of them (with a warning)."""
        progress = self._progress
        if progress.stream is not None and progress.stream.restore(progress.epoch, skip):
            shard = self.dataset
            if isinstance(shard, IterableDatasetShard):
                shard.restart_state = progress.stream.start
            return 0
        warn_replay(self.dataset, getattr(self, "num_workers", 0), progress.epoch, skip, self.total_batch_size)
        return skip

    def state_dict(self) -> dict[str, Any]:
        """The position: epoch, batches already handed out in it, and the shuffling seed
        (with ``use_stateful_dataloader``: ``StatefulDataLoader``'s state)."""
        base = self._stateful_base()
        if base is not None:
            if self._read_state is not None:
                return self._read_state
            return base.state_dict(self)
        progress = self._progress
        state = {
            "format": STATE_FORMAT,
            "epoch": progress.epoch,
            "batches_yielded": progress.batches_yielded,
            # the position every layout understands: a job may resume on another number of processes
            "samples_yielded": progress.batches_yielded * (self.total_batch_size or 0),
            "seed": progress.seed,
            "total_batch_size": self.total_batch_size,
            "num_processes": progress.num_processes,
            # a position mid-epoch means those samples only over the same dataset (None: no length)
            "dataset_length": self.total_dataset_length,
        }
        draws = progress.draws.state_dict() if progress.draws is not None else None
        if draws is not None:
            state["draws"] = draws  # what the pass in progress drew, replayed on resume
        dataset_state = self._dataset_state()
        if dataset_state is not None:
            state["dataset_state"] = dataset_state  # where the iterable dataset resumes, without replay
        return state

    def _dataset_state(self) -> Any:
        """The iterable dataset's own state at the position (``None``: it keeps none, or the
        position is an epoch's start)."""
        progress, stream = self._progress, self._progress.stream
        if stream is None or not progress.batches_yielded:
            return None
        if progress.fresh:  # restored and not played yet
            return stream.pending(progress.epoch, progress.batches_yielded)
        return self._read_state

    def check_state_dict(self, state_dict: Any) -> None:
        """Refuse a state this loader cannot resume from (another kind of loader's, a damaged
        value, a position past this loader's epoch) with a ``ConfigError`` naming the field;
        changes nothing. ``load_state`` calls it for every loader before it restores anything."""
        if self._stateful_base() is not None:
            check_stateful_state(state_dict)
            return
        check_position_state(state_dict, STATE_FORMAT)
        if self._progress.draws is not None:
            self._progress.draws.checked_record(state_dict.get("draws"))
        batches, _samples = resumed_batches(state_dict, self.total_batch_size)
        try:
            per_epoch: int | None = len(self) + self.skip_batches  # the whole epoch, skipped batches too
        except (TypeError, NotImplementedError):  # an iterable dataset without a length
            per_epoch = None
        check_within_epoch(batches, per_epoch, state_dict["epoch"])
        check_same_dataset(state_dict, self.total_dataset_length)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved position: the next pass resumes at the next unseen batch."""
        self.check_state_dict(state_dict)
        base = self._stateful_base()
        if base is not None:
            base.load_state_dict(self, state_dict)
            # The position until the next batch is handed out. Not torchdata's ``state_dict()``:
            # that builds an iterator and replays the loaded state, which raises StopIteration
            # when it is an exhausted pass's.
            self._read_state = state_dict
            progress = self._progress
            progress.batches_yielded, progress.fresh = 0, True  # torchdata skips, not us
            return
        progress = self._progress
        if progress.draws is not None:  # first: it refuses a state it cannot replay, before anything changes
            progress.draws.load_state_dict(state_dict.get("draws"))
        saved_total = state_dict.get("total_batch_size")
        total = self.total_batch_size
        batches, samples = resumed_batches(state_dict, total)
        if samples is not None and total and saved_total != total:
            if samples % total and state_dict.get("dataset_state") is None:
                logger.warning("the data loader state was saved with %d samples per step and this loader has %d; "
                               "resuming after %d batches (%d samples were seen, %d are replayed)",
                               saved_total, total, batches, samples, samples - batches * total)
        progress.epoch = int(state_dict["epoch"])
        progress.batches_yielded = batches
        progress.fresh = True
        progress.seed = int(state_dict["seed"])
        progress.seed_agreed = True
        if progress.stream is not None:
            progress.stream.remember(progress.epoch, batches, state_dict.get("dataset_state"))
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
