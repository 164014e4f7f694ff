"""Launched on 2 processes: prepared data loaders across real processes.

For every combination of map-style / iterable dataset, split_batches, even_batches,
drop_last, dispatch and shuffling, and for dataset lengths that do and do not divide
evenly, checks which samples each process sees, that gather_for_metrics returns each
sample exactly once, resuming (skip_first_batches, state_dict, an iterable dataset's own
state), and shuffling that is identical on every process and reproducible. Prints CHECK-DATA-LOADING-OK at the end.
"""

from __future__ import annotations

import collections
import itertools
import math

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from drivetrain.data_loader import (
    DataLoaderDispatcher,
    DataLoaderShard,
    prepare_data_loader,
    skip_first_batches,
)
from drivetrain.state import GradientState, PartialState
from drivetrain.utils import gather, gather_for_metrics, gather_object, set_seed

torch.set_num_threads(1)
state = PartialState()
RANK, WORLD = state.process_index, state.num_processes
BATCH = 4


class Numbers(Dataset):
    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return {"text": f"sample-{index}", "id": torch.tensor(index)}  # a non-tensor leaf first


class Stream(IterableDataset):
    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __iter__(self):
        for index in range(self.length):
            yield {"id": torch.tensor(index)}


def prepare(length, iterable=False, shuffle=False, drop_last=False, **options):
    dataset = Stream(length) if iterable else Numbers(length)
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=shuffle and not iterable, drop_last=drop_last)
    return prepare_data_loader(loader, device=state.device, put_on_device=True, **options)


def play(loader):
    """(ids of every batch this process got, ids gather_for_metrics returned, end flags)."""
    mine, metrics, ends = [], [], []
    for batch in loader:
        ids = batch["id"]
        mine.append(ids.tolist())
        ends.append(GradientState().end_of_dataloader)
        if loader_is_even(loader):
            metrics.extend(gather_for_metrics(ids).tolist())
    return mine, metrics, ends


def loader_is_even(loader):
    shard = getattr(loader, "_shard_sampler", None)
    if isinstance(loader, DataLoaderDispatcher):
        return loader.even_batches
    if shard is not None and shard.num_processes > 1:
        return shard.even_batches
    dataset = loader.dataset
    return getattr(dataset, "even_batches", True)


def expected_kept(length, split, drop_last):
    per_step = BATCH if split else BATCH * WORLD
    return (length // per_step) * per_step if drop_last else length


def check_every_sample_once_per_epoch():
    combos = itertools.product((16, 13, 3), (False, True), (False, True), (True, False), (False, True), (False, True),
                               (False, True))
    checked = 0
    for length, iterable, split, even, drop_last, dispatch, shuffle in combos:
        if iterable and shuffle:
            continue
        set_seed(7)
        loader = prepare(length, iterable=iterable, shuffle=shuffle, drop_last=drop_last, split_batches=split,
                         even_batches=even, dispatch_batches=dispatch)
        expected_class = DataLoaderDispatcher if dispatch else DataLoaderShard
        assert isinstance(loader, expected_class), type(loader)
        label = dict(length=length, iterable=iterable, split=split, even=even, drop_last=drop_last, dispatch=dispatch,
                     shuffle=shuffle)
        mine, metrics, ends = play(loader)
        everyone = gather_object([mine])
        seen = [i for batches in everyone for batch in batches for i in batch]
        kept = expected_kept(length, split, drop_last)
        counts = collections.Counter(seen)
        if drop_last:
            assert sorted(seen) == sorted(set(seen)) and len(seen) == kept, (label, everyone)
        elif even:
            assert set(seen) == set(range(length)), (label, everyone)
            assert len({len(batches) for batches in everyone}) == 1, (label, everyone)  # same number of steps
            for step in zip(*everyone):  # at each step, every process gets a batch of the same size
                assert len({len(batch) for batch in step}) == 1, (label, everyone)
            if not dispatch:  # sharded batches are all full; a dispatched last batch is shared out evenly
                assert len({len(batch) for batches in everyone for batch in batches}) == 1, (label, everyone)
        else:
            assert sorted(seen) == list(range(length)), (label, everyone)  # each exactly once, nothing added
        assert max(counts.values(), default=1) <= 1 or (even and not drop_last), (label, counts)
        if mine:
            assert ends[-1] and not any(ends[:-1]), (label, ends)
        if loader_is_even(loader):
            assert sorted(metrics) == sorted(seen if drop_last else range(length)) and len(metrics) == kept, \
                (label, metrics)
        if even or drop_last or not (iterable or dispatch):
            assert len(loader) == len(mine), (label, len(loader), len(mine))
        checked += 1
    return checked


def check_shuffle_same_everywhere_and_reproducible():
    orders = []
    for _ in range(2):
        set_seed(11)
        loader = prepare(32, shuffle=True, split_batches=True)
        epochs = [[batch["id"].tolist() for batch in loader] for _ in range(2)]
        orders.append(epochs)
    assert orders[0] == orders[1], "the same seed gave another shuffle"
    assert orders[0][0] != orders[0][1], "two epochs were shuffled alike"
    whole = gather_object([orders[0][0]])
    # split_batches: each process holds half of each global batch; together they cover it once
    firsts = [sorted(whole[0][step] + whole[1][step]) for step in range(len(whole[0]))]
    assert sorted(i for batch in firsts for i in batch) == list(range(32))
    assert firsts != [list(range(s * BATCH, (s + 1) * BATCH)) for s in range(8)], "not shuffled"
    # different global torch state on each rank before preparing: process 0's seed wins
    torch.manual_seed(100 + RANK)
    loader = prepare(32, shuffle=True)
    got = gather_object([[i for batch in loader for i in batch["id"].tolist()]])
    assert sorted(got[0] + got[1]) == list(range(32)), got
    # a pass draws from the global generator what a plain loader draws there: its base seed
    before = torch.get_rng_state()
    for _ in loader:
        pass
    after = torch.get_rng_state()
    torch.set_rng_state(before)
    torch.empty((), dtype=torch.int64).random_()
    assert torch.equal(after, torch.get_rng_state())
    # with the seedable sampler, data_seed fixes the order regardless of the global seed
    orders = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        loader = prepare(16, shuffle=True, data_seed=5, use_seedable_sampler=True)
        orders.append([batch["id"].tolist() for batch in loader])
    assert orders[0] == orders[1], orders


def check_skip_first_batches_resumes():
    for dispatch, iterable, shuffle in ((False, False, True), (True, False, True), (False, True, False),
                                        (True, True, False)):
        set_seed(3)
        loader = prepare(40, iterable=iterable, shuffle=shuffle, dispatch_batches=dispatch,
                         use_seedable_sampler=shuffle)
        full = [batch["id"].tolist() for batch in loader]
        loader.set_epoch(0)  # replay epoch 0 (the seedable sampler's order depends on the epoch only)
        skipped = skip_first_batches(loader, num_batches=2)
        assert len(skipped) == len(full) - 2
        resumed = [batch["id"].tolist() for batch in skipped]
        assert resumed == full[2:], (dispatch, iterable, resumed, full)
        after = [batch["id"].tolist() for batch in loader]  # the original continues with epoch 1
        assert loader.iteration == 2 and (iterable or after != full), (dispatch, iterable)


def check_state_dict_resumes_mid_epoch():
    for dispatch, iterable in ((False, False), (True, False), (False, True), (True, True)):
        set_seed(5)
        loader = prepare(49, iterable=iterable, shuffle=not iterable, dispatch_batches=dispatch)
        for _ in loader:
            pass
        taken, saved = [], None
        for step, batch in enumerate(loader):
            taken.append(batch["id"].tolist())
            if step == 2:
                saved = loader.state_dict()
        assert saved["epoch"] == 1 and saved["batches_yielded"] == 3, saved
        set_seed(999)  # another global seed: the restored state decides the shuffle
        restored = prepare(49, iterable=iterable, shuffle=not iterable, dispatch_batches=dispatch)
        restored.load_state_dict(saved)
        rest = [batch["id"].tolist() for batch in restored]
        assert rest == taken[3:], (dispatch, iterable, rest, taken)
        assert restored.state_dict()["epoch"] == 2
        # an Accelerate-style script also calls skip_first_batches after loading: no double skip
        again = prepare(49, iterable=iterable, shuffle=not iterable, dispatch_batches=dispatch)
        again.load_state_dict(saved)
        assert [batch["id"].tolist() for batch in skip_first_batches(again, 3)] == taken[3:]


class PositionedStream(Stream):
    """A stream that keeps its own position (``state_dict``/``load_state_dict``) and counts reads."""

    def __init__(self, length):
        super().__init__(length)
        self.read, self.position, self.resume_at = 0, 0, 0

    def __iter__(self):
        start, self.resume_at = self.resume_at, 0
        for index in range(start, self.length):
            self.position, self.read = index + 1, self.read + 1
            yield {"id": torch.tensor(index)}

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.resume_at = self.position = state["position"]


def check_a_stream_with_its_own_state_resumes_without_reading_the_seen_part():
    for dispatch in (False, True):
        length = 8 * 40 + 5  # a short last round: completed with the epoch's first samples, read again

        def make():
            stream = PositionedStream(length)
            return stream, prepare_data_loader(DataLoader(stream, batch_size=BATCH), device=state.device,
                                               put_on_device=True, dispatch_batches=dispatch)

        _stream, loader = make()
        taken, saved = [], None
        for step, batch in enumerate(loader):
            taken.append(batch["id"].tolist())
            if step == 29:
                saved = loader.state_dict()
        reads_itself = RANK == 0 or not dispatch  # dispatching: only the main process reads
        if reads_itself:
            assert saved["dataset_state"] == {"position": 30 * BATCH * WORLD}, saved
        saved = gather_object([saved])[0]  # the main process's state is the one a checkpoint keeps
        stream, restored = make()
        restored.load_state_dict(saved)
        iterator = iter(restored)
        first = next(iterator)["id"].tolist()
        reads = stream.read
        rest = [first, *(batch["id"].tolist() for batch in iterator)]
        assert rest == taken[30:], (dispatch, rest, taken[30:])
        if reads_itself:
            assert reads <= 2 * BATCH * WORLD, (dispatch, reads)


def check_rng_types_and_non_tensor_leaves():
    torch.manual_seed(RANK)
    loader = prepare(8, rng_types=["torch"])
    for _ in loader:
        break
    draws = gather_object([float(torch.rand(1))])
    assert draws[0] == draws[1], draws
    dispatched = prepare(8, dispatch_batches=True)
    texts = [batch["text"] for batch in dispatched]
    assert texts and all(len(text) == BATCH * WORLD for text in texts)  # not tensors: every process gets them whole
    assert gather(torch.tensor([len(texts)])).tolist() == [len(texts)] * WORLD


def check_uneven_iteration_counts_are_documented():
    loader = prepare(10, even_batches=False)
    lengths = gather_object([len(loader)])
    assert lengths == [2, 1], lengths  # batches [0-3] [8, 9] on rank 0, [4-7] on rank 1


checked = check_every_sample_once_per_epoch()
check_shuffle_same_everywhere_and_reproducible()
check_skip_first_batches_resumes()
check_state_dict_resumes_mid_epoch()
check_a_stream_with_its_own_state_resumes_without_reading_the_seen_part()
check_rng_types_and_non_tensor_leaves()
check_uneven_iteration_counts_are_documented()
state.wait_for_everyone()
print(f"CHECK-DATA-LOADING-OK rank {RANK} ({checked} configurations)", flush=True)
state.destroy_process_group()  # a clean exit: gloo may abort a process that leaves with the group open
