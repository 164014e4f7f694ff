"""Resuming deep into an epoch reads nothing that was already seen.

Map-style loaders jump to the position in their sampler's order; iterable datasets that keep
their own position (``state_dict``/``load_state_dict``) are restored from it; others are
replayed, with a warning that counts the batches. Every case is checked against the batches
an uninterrupted pass yields.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from drivetrain.data_loader import prepare_data_loader
from drivetrain.services.data_loader import sharding

pytestmark = pytest.mark.usefixtures("fresh_state")

DEEP = 1000  # batches seen before the interruption


class CountedItems(Dataset):
    """A map-style dataset that counts the samples it loads."""

    def __init__(self, length):
        self.length, self.loaded = length, 0

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        self.loaded += 1
        return index


class PositionedStream(IterableDataset):
    """An iterable dataset that keeps its own position: ``load_state_dict`` makes the next
    pass start there. ``read`` counts the samples it yields."""

    def __init__(self, length):
        self.length, self.read = length, 0
        self.position, self.resume_at = 0, 0

    def __iter__(self):
        start, self.resume_at = self.resume_at, 0
        for index in range(start, self.length):
            self.position = index + 1
            self.read += 1
            yield index

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.resume_at = self.position = state["position"]


class PlainStream(IterableDataset):
    def __init__(self, length):
        self.length, self.read = length, 0

    def __iter__(self):
        for index in range(self.length):
            self.read += 1
            yield index


def ids(batches):
    return [batch.tolist() if isinstance(batch, torch.Tensor) else batch for batch in batches]


def interrupted_at(make, batches, rank=0):
    """The loader state after ``batches`` batches of epoch 0, and the batches an uninterrupted
    epoch yields after them."""
    torch.manual_seed(7)
    loader = make()
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    saved = loader.state_dict()
    rest = ids(iterator)
    return saved, rest


def count_batches_made(monkeypatch):
    """Counts the batches the plain-batch-sampler fast path slices out of the index order."""
    made = []
    original = sharding._sliced_batches

    def counted(*args, **kwargs):
        for batch in original(*args, **kwargs):
            made.append(1)
            yield batch

    monkeypatch.setattr(sharding, "_sliced_batches", counted)
    return made


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("n, split", [(1, False), (2, False), (2, True)])
def test_a_map_style_resume_loads_and_slices_no_skipped_batch(monkeypatch, shuffle, n, split):
    length, size = 4 * (DEEP * n + 7) + 3, 4  # a short last batch: the even round is completed from the start

    def make(dataset=None, index=n - 1):
        generator = torch.Generator().manual_seed(11) if shuffle else None
        loader = DataLoader(dataset or CountedItems(length), batch_size=size, shuffle=shuffle, generator=generator)
        return prepare_data_loader(loader, num_processes=n, process_index=index, split_batches=split)

    saved, rest = interrupted_at(make, DEEP)
    assert saved["batches_yielded"] == DEEP
    made = count_batches_made(monkeypatch)
    dataset = CountedItems(length)
    torch.manual_seed(99)  # the restored state decides the order
    resumed = make(dataset)
    resumed.load_state_dict(saved)
    iterator = iter(resumed)
    first = next(iterator).tolist()
    # the batch handed out and the one read ahead; nothing before them
    assert dataset.loaded <= 2 * size, dataset.loaded
    assert len(made) <= 2 * n, len(made)
    assert [first, *ids(iterator)] == rest


def test_a_resume_through_a_seedable_sampler_jumps_too(monkeypatch):
    def make():
        loader = DataLoader(CountedItems(8 * DEEP), batch_size=4, shuffle=True)
        return prepare_data_loader(loader, num_processes=2, process_index=1, use_seedable_sampler=True, data_seed=3)

    saved, rest = interrupted_at(make, DEEP // 2)
    made = count_batches_made(monkeypatch)
    resumed = make()
    resumed.load_state_dict(saved)
    assert ids(resumed) == rest and len(made) == 2 * len(rest)


# dispatching shares out on the run's processes: on two, it is checked launched (check_data_loading.py)
@pytest.mark.parametrize("n, dispatch", [(1, False), (2, False), (1, True)])
def test_a_stream_with_its_own_state_resumes_from_it(caplog, dispatch, n):
    size = 2
    length = size * n * (DEEP + 5) + 1  # a short last round, completed with the epoch's first samples
    streams = []

    def make():
        streams.append(PositionedStream(length))
        loader = DataLoader(streams[-1], batch_size=size)
        return prepare_data_loader(loader, num_processes=n, process_index=n - 1, dispatch_batches=dispatch,
                                   put_on_device=dispatch, device=torch.device("cpu"))

    saved, rest = interrupted_at(make, DEEP)
    assert saved["dataset_state"] == {"position": DEEP * size * n}  # as of the batch handed out, not the one read ahead
    resumed = make()
    resumed.load_state_dict(saved)
    assert resumed.state_dict()["dataset_state"] == saved["dataset_state"]  # saved again before playing: kept
    with caplog.at_level(logging.WARNING):
        iterator = iter(resumed)
        first = next(iterator).tolist()
        assert streams[-1].read <= 2 * size * n, streams[-1].read
        assert [first, *ids(iterator)] == rest
    assert "read again" not in caplog.text
    if n == 1:
        assert ids(resumed)[0] == [0, 1]  # the next epoch starts from the beginning


def test_a_stream_without_state_is_replayed_with_a_warning_that_counts(caplog):
    def make():
        return prepare_data_loader(DataLoader(PlainStream(2 * DEEP + 10), batch_size=2), num_processes=1,
                                   process_index=0)

    saved, rest = interrupted_at(make, DEEP)
    assert "dataset_state" not in saved
    resumed = make()
    resumed.load_state_dict(saved)
    with caplog.at_level(logging.WARNING):
        assert ids(resumed) == rest
    assert f"the {DEEP} batches ({2 * DEEP} samples) already seen are read again" in caplog.text
    assert "PlainStream has no state_dict()" in caplog.text


def test_a_stream_read_in_workers_is_replayed_with_a_warning_naming_the_fix(caplog):
    loader = prepare_data_loader(DataLoader(PositionedStream(40), batch_size=2, num_workers=1), num_processes=1,
                                 process_index=0)
    loader.load_state_dict({"epoch": 0, "batches_yielded": 3, "seed": 0})
    with caplog.at_level(logging.WARNING):
        assert ids(loader)[0] == [6, 7]
    assert "use_stateful_dataloader=True" in caplog.text


def test_a_streaming_datasets_dataset_resumes_through_save_state(tmp_path, caplog):
    datasets = pytest.importorskip("datasets")
    from drivetrain import Accelerator

    read = []

    def stream():
        table = datasets.Dataset.from_dict({"x": list(range(4 * DEEP))})
        return table.to_iterable_dataset(num_shards=4).map(lambda row: read.append(1) or row).with_format("torch")

    def make(accelerator):
        return accelerator.prepare(DataLoader(stream(), batch_size=4))

    accelerator = Accelerator()
    loader = make(accelerator)
    iterator = iter(loader)
    for _ in range(DEEP // 2):
        next(iterator)
    accelerator.save_state(tmp_path / "checkpoint")
    rest = [batch["x"].tolist() for batch in iterator]
    accelerator.end_training()

    accelerator = Accelerator()
    resumed = make(accelerator)
    accelerator.load_state(tmp_path / "checkpoint")
    read.clear()
    with caplog.at_level(logging.WARNING):
        iterator = iter(resumed)
        first = next(iterator)["x"].tolist()
        assert len(read) <= 2 * 4, len(read)
        assert [first, *(batch["x"].tolist() for batch in iterator)] == rest
    assert "read again" not in caplog.text
