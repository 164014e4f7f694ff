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

Shuffling draws what a plain ``DataLoader`` would draw from torch's generators (its base
seed; a ``RandomSampler``'s seed on one process, or, on several, a sampler generator seeded
once from the global one and handed from process 0 to the others at each pass; see
:mod:`.draws`), so ``set_seed`` gives the order and the later random numbers that the plain
loader, and Accelerate, give. The states a pass started from are part of the loader's state,
so a resumed pass replays them. ``use_seedable_sampler`` shuffles epoch ``e`` with a private
generator seeded ``seed + e`` instead.
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
