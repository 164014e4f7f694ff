"""Resuming an iterable dataset mid-epoch without reading again what was already seen.

A map-style dataset is resumed by position alone (the batch sampler jumps to it, see
:class:`.sharding.BatchSamplerShard`). An iterable dataset can only be read from its start,
unless it keeps its own position: a dataset with ``state_dict()`` and ``load_state_dict()``
(``datasets``' streaming datasets, torchdata's stateful iterables, a class of one's own) is
asked for its state with every batch a prepared loader reads, the state of the last batch
handed out goes into the loader's ``state_dict()``, and a restored pass loads it into the
dataset before the pass begins, so the dataset starts where the saved run stopped.

The contract asked of such a dataset: ``state_dict()`` is its position after the last sample
it yielded, and ``load_state_dict(state)`` makes its next ``iter()`` start there (the passes
after that one start from the beginning again, or from the epoch that ``set_epoch`` chose).

Without such a state, or when the dataset is read in worker processes (whose copies the
loader cannot ask), resuming reads the seen batches again and drops them; a warning says how
many.
"""

from __future__ import annotations

import logging
from typing import Any

from torch.utils.data import IterableDataset

from .sharding import IterableDatasetShard

logger = logging.getLogger("drivetrain.data_loader.progress")


def keeps_its_position(dataset: Any) -> bool:
    """Whether ``dataset`` is an iterable dataset with ``state_dict()`` and ``load_state_dict()``."""
    return (isinstance(dataset, IterableDataset) and callable(getattr(dataset, "state_dict", None))
            and callable(getattr(dataset, "load_state_dict", None)))


class StreamPosition:
    """The own position of the iterable dataset a prepared loader reads in its process.

    Args:
        stream: the user's dataset (inside an ``IterableDatasetShard`` when processes share it).

    ``start`` is its state before any reading: a pass resumed from a saved state reads the
    epoch's first samples again from there when it needs them (to complete a short last round).
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.start = stream.state_dict()
        self.saved: tuple[int, int, Any] | None = None  # (epoch, batches, dataset state) to restore

    @classmethod
    def of(cls, dataset: Any, num_workers: int) -> StreamPosition | None:
        """The position to keep for the dataset a loader reads (``None``: it cannot be kept)."""
        stream = dataset.dataset if isinstance(dataset, IterableDatasetShard) else dataset
        if num_workers or not keeps_its_position(stream):
            return None
        return cls(stream)

    def read(self) -> Any:
        """The dataset's state now (after the batch just read)."""
        return self.stream.state_dict()

    def remember(self, epoch: int, batches: int, state: Any) -> None:
        """A restored position: the pass of ``epoch`` resumed after ``batches`` starts at ``state``."""
        self.saved = (epoch, batches, state) if batches and state is not None else None

    def pending(self, epoch: int, batches: int) -> Any:
        """The restored state for that position, not yet loaded into the dataset (or ``None``)."""
        if self.saved is not None and self.saved[:2] == (epoch, batches):
            return self.saved[2]
        return None

    def restore(self, epoch: int, batches: int) -> bool:
        """Load the saved state into the dataset when it is for this position; whether it was."""
        state = self.pending(epoch, batches)
        self.saved = None
        if state is None:
            return False
        self.stream.load_state_dict(state)
        return True


def warn_replay(dataset: Any, num_workers: int, epoch: int, batches: int, samples_per_batch: int | None) -> None:
    """The one warning of a resume that reads ``batches`` seen batches again to drop them."""
    inner = dataset.dataset if isinstance(dataset, IterableDatasetShard) else dataset
    samples = f" ({batches * samples_per_batch} samples)" if samples_per_batch else ""
    if keeps_its_position(inner) and num_workers:
        why = (f"its state is kept in the {num_workers} worker processes, which the loader cannot ask; "
               "use DataLoaderConfiguration(use_stateful_dataloader=True), or num_workers=0")
    else:
        why = (f"{type(inner).__name__} has no state_dict()/load_state_dict(); give it both (as datasets' "
               "streaming datasets have) to resume without reading them")
    logger.warning("resuming epoch %d of an iterable dataset at batch %d: the %d batches%s already seen are read "
                   "again and dropped, because %s", epoch, batches, batches, samples, why)
