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

# The package has three jobs, one module each: sharding rules (sharding.py), position and
# resume state (progress.py), how batches reach a process (transport.py); prepare.py builds
# the prepared loader from the user's.
from .prepare import DataLoaderAdapter, _loader_arguments, get_sampler, prepare_data_loader, skip_first_batches
from .progress import STATE_FORMAT, DataLoaderStateMixin, _PreparedLoader, _Progress
from .sharding import (
    BatchSamplerShard,
    IterableDatasetShard,
    SeedableRandomSampler,
    SkipBatchSampler,
    SkipDataLoader,
    _all_indices,
    _mix,
)
from .transport import DataLoaderDispatcher, DataLoaderShard

__all__ = [
    "prepare_data_loader", "skip_first_batches", "get_sampler", "SeedableRandomSampler", "BatchSamplerShard",
    "IterableDatasetShard", "DataLoaderShard", "DataLoaderDispatcher", "SkipBatchSampler", "SkipDataLoader",
    "DataLoaderStateMixin", "DataLoaderAdapter",
]
