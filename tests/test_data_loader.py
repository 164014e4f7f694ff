"""Data loading in one process: shards of every process computed side by side.

``prepare_data_loader(..., num_processes=N, process_index=i)`` builds the loader process
``i`` would get, so every shard can be checked here without launching processes. The same
loaders across two real processes (dispatching, seed agreement, gather_for_metrics) are
checked by tests/scripts/check_data_loading.py.
"""

from __future__ import annotations

import collections
import itertools

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler, SequentialSampler

from drivetrain.data_loader import (
    BatchSamplerShard,
    DataLoaderShard,
    IterableDatasetShard,
    SeedableRandomSampler,
    SkipBatchSampler,
    SkipDataLoader,
    get_sampler,
    prepare_data_loader,
    skip_first_batches,
)
from drivetrain.errors import ConfigError
from drivetrain.state import GradientState

pytestmark = pytest.mark.usefixtures("fresh_state")


class Stream(IterableDataset):
    def __init__(self, length, sized=True):
        self.length, self.sized = length, sized
        self.epochs = []

    def __iter__(self):
        return iter(range(self.length))

    def __len__(self):
        if not self.sized:
            raise TypeError("no length")
        return self.length

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


def batches(sampler):
    return [list(batch) for batch in sampler]


def shards(length, batch_size, n, **options):
    drop_last = options.pop("drop_last", False)
    sampler = BatchSampler(SequentialSampler(range(length)), batch_size, drop_last)
    return [batches(BatchSamplerShard(sampler, n, i, **options)) for i in range(n)]


# ------------------------------------------------------------------ BatchSamplerShard


def test_round_robin_completes_the_last_round_from_the_start():
    assert shards(16, 4, 2) == [[[0, 1, 2, 3], [8, 9, 10, 11]], [[4, 5, 6, 7], [12, 13, 14, 15]]]
    assert shards(10, 4, 2) == [[[0, 1, 2, 3], [8, 9, 0, 1]], [[4, 5, 6, 7], [2, 3, 4, 5]]]
    assert shards(3, 4, 2) == [[[0, 1, 2, 0]], [[1, 2, 0, 1]]]  # fewer samples than one round
    assert shards(14, 4, 2) == [[[0, 1, 2, 3], [8, 9, 10, 11]], [[4, 5, 6, 7], [12, 13, 0, 1]]]


def test_round_robin_uneven_and_drop_last():
    assert shards(10, 4, 2, even_batches=False) == [[[0, 1, 2, 3], [8, 9]], [[4, 5, 6, 7]]]
    assert shards(10, 4, 2, drop_last=True) == [[[0, 1, 2, 3]], [[4, 5, 6, 7]]]
    assert shards(13, 2, 3, drop_last=True) == [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5], [10, 11]]]


def test_split_batches():
    assert shards(8, 4, 2, split_batches=True) == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    assert shards(10, 4, 2, split_batches=True) == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]]
    # a short last batch is cut like a full one: the later processes get what is left
    assert shards(10, 4, 2, split_batches=True, even_batches=False) == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7]]]
    assert [len(BatchSamplerShard(BatchSampler(range(10), 4, False), 2, i, split_batches=True, even_batches=False))
            for i in range(2)] == [3, 2]
    assert shards(9, 4, 2, split_batches=True, even_batches=False) == [[[0, 1], [4, 5], [8]], [[2, 3], [6, 7]]]
    assert shards(10, 4, 2, split_batches=True, drop_last=True) == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    with pytest.raises(ConfigError, match="multiple of the number of processes"):
        BatchSamplerShard(BatchSampler(range(8), 3, False), 2, 0, split_batches=True)


@pytest.mark.parametrize("length,batch_size,n", [(16, 4, 2), (17, 4, 2), (5, 4, 2), (23, 3, 4), (1, 2, 3), (0, 4, 2)])
@pytest.mark.parametrize("split,even,drop_last", list(itertools.product((False, True), repeat=3)))
def test_every_sample_once_or_padded(length, batch_size, n, split, even, drop_last):
    if split and batch_size % n:
        batch_size *= n
    got = shards(length, batch_size, n, split_batches=split, even_batches=even, drop_last=drop_last)
    sampler = BatchSampler(SequentialSampler(range(length)), batch_size, drop_last)
    for index, mine in enumerate(got):
        assert len(BatchSamplerShard(sampler, n, index, split, even)) == len(mine)
    seen = [i for mine in got for batch in mine for i in batch]
    if drop_last:
        per_step = batch_size if split else batch_size * n
        assert sorted(seen) == list(range(length // per_step * per_step))
    elif even:
        assert set(seen) == set(range(length))
        assert len({len(mine) for mine in got}) == 1
        assert len({len(batch) for mine in got for batch in mine}) <= 1
    else:
        assert sorted(seen) == list(range(length))


class CustomBatchSampler(BatchSampler):
    """Not a plain BatchSampler: read batch by batch, the general way."""


@pytest.mark.parametrize("length", [0, 1, 5, 8, 13, 16, 23])
@pytest.mark.parametrize("split,even,drop_last", list(itertools.product((False, True), repeat=3)))
def test_the_fast_path_for_plain_batch_samplers_matches_the_general_one(length, split, even, drop_last):
    for n, batch_size in ((2, 4), (3, 3), (1, 4)):
        if split and batch_size % n:
            continue
        for index in range(n):
            fast = BatchSamplerShard(BatchSampler(SequentialSampler(range(length)), batch_size, drop_last), n, index,
                                     split, even)
            general = BatchSamplerShard(CustomBatchSampler(SequentialSampler(range(length)), batch_size, drop_last), n,
                                        index, split, even)
            expected = batches(general)
            assert batches(fast) == expected, (n, index)
            fast.skip_next(1)
            general.skip_next(1)
            assert batches(fast) == batches(general) == expected[1:]


def test_batch_samplers_without_a_batch_size_are_evened_out_by_whole_batches():
    class Buckets:
        def __init__(self, buckets, drop_last=False):
            self.buckets, self.drop_last = buckets, drop_last

        def __iter__(self):
            return iter(self.buckets)

        def __len__(self):
            return len(self.buckets)

    five = [[0, 1, 2], [3], [4, 5], [6, 7], [8]]
    # a process left out of the short last round gets the epoch's first batches, cycled
    assert [batches(BatchSamplerShard(Buckets(five), 3, i)) for i in range(3)] == [
        [[0, 1, 2], [6, 7]], [[3], [8]], [[4, 5], [0, 1, 2]]]
    assert [batches(BatchSamplerShard(Buckets([[0, 1]]), 3, i)) for i in range(3)] == [[[0, 1]]] * 3
    assert [len(BatchSamplerShard(Buckets(five), 3, i)) for i in range(3)] == [2, 2, 2]
    assert batches(BatchSamplerShard(Buckets(five, drop_last=True), 2, 1)) == [[3], [6, 7]]
    assert batches(BatchSamplerShard(Buckets(five), 2, 1, even_batches=False)) == [[3], [6, 7]]
    with pytest.raises(ConfigError, match="split_batches=True .* batch_size"):
        BatchSamplerShard(Buckets(five), 2, 0, split_batches=True)


def test_split_batches_error_names_the_batch_size_rule():
    with pytest.raises(ConfigError, match="round multiple of the number of processes; got batch size 3 for 2"):
        BatchSamplerShard(BatchSampler(range(20), 3, False), 2, 0, split_batches=True)


# --------------------------------------------------------------- IterableDatasetShard


@pytest.mark.parametrize("split", [False, True])
def test_iterable_dataset_shard(split):
    def run(length, **options):
        return [list(IterableDatasetShard(range(length), 4, num_processes=2, process_index=i, split_batches=split,
                                          **options)) for i in range(2)]

    if split:
        assert run(8) == [[0, 1, 4, 5], [2, 3, 6, 7]]
        assert run(10) == [[0, 1, 4, 5, 8, 9], [2, 3, 6, 7, 0, 1]]
        assert run(10, even_batches=False) == [[0, 1, 4, 5, 8, 9], [2, 3, 6, 7]]
    else:
        assert run(8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
        assert run(10) == [[0, 1, 2, 3, 8, 9, 0, 1], [4, 5, 6, 7, 2, 3, 4, 5]]
        assert run(3) == [[0, 1, 2, 0], [1, 2, 0, 1]]
        assert run(10, even_batches=False) == [[0, 1, 2, 3, 8, 9], [4, 5, 6, 7]]
    assert run(10, drop_last=True) == ([[0, 1, 4, 5], [2, 3, 6, 7]] if split else [[0, 1, 2, 3], [4, 5, 6, 7]])
    shard = IterableDatasetShard(range(10), 4, num_processes=2, split_batches=split)
    assert len(shard) == len(list(shard))


# ------------------------------------------------------------------- prepared loaders


def ids(loader):
    return [batch.tolist() for batch in loader]


def test_prepared_shards_cover_the_dataset_and_signal_the_end():
    state = GradientState()
    loaders = [on_process(i, dataloader=DataLoader(list(range(10)), batch_size=2, shuffle=True)) for i in range(2)]
    assert all(isinstance(loader, DataLoaderShard) for loader in loaders)
    seen, ends = [], []
    for loader in loaders:
        assert len(loader) == 3 and loader.total_batch_size == 4 and loader.total_dataset_length == 10
        for batch in loader:
            seen.extend(batch.tolist())
            ends.append(state.end_of_dataloader)
            assert state.active_dataloader is loader and loader.remainder == 2
        assert state.active_dataloader is None
    assert set(seen) == set(range(10)) and len(seen) == 12
    assert ends == [False, False, True] * 2


def test_shuffling_is_reproducible_and_seedable_shuffling_depends_only_on_its_seed():
    def order(seed, **options):
        torch.manual_seed(seed)
        loader = prepare_data_loader(DataLoader(list(range(20)), batch_size=4, shuffle=True), num_processes=1,
                                     process_index=0, **options)
        return [ids(loader), ids(loader)]

    first = order(1)
    assert first == order(1) and first[0] != first[1] and first != order(2)
    assert order(1, use_seedable_sampler=True, data_seed=9) == order(3, use_seedable_sampler=True, data_seed=9)
    generator = torch.Generator().manual_seed(5)
    loader = prepare_data_loader(DataLoader(list(range(20)), batch_size=4, shuffle=True, generator=generator),
                                 num_processes=1, process_index=0)
    assert loader.state_dict()["seed"] == 5 and generator.initial_seed() == 5


def on_process(index, seed=0, **options):
    """A loader prepared as process ``index`` of two, each of which ran ``set_seed(seed)``."""
    torch.manual_seed(seed)
    return prepare_data_loader(num_processes=2, process_index=index, **options)


def test_shards_of_one_shuffle_are_disjoint():
    loaders = [on_process(i, dataloader=DataLoader(list(range(24)), batch_size=3, shuffle=True)) for i in range(2)]
    for _epoch in range(2):
        seen = [i for loader in loaders for batch in loader for i in batch.tolist()]
        assert sorted(seen) == list(range(24))


def test_a_samplers_own_generator_is_drawn_from_as_a_plain_loader_draws_from_it():
    user_generator = torch.Generator()
    sampler = torch.utils.data.WeightedRandomSampler([1.0] * 10, 10, generator=user_generator)
    loader = DataLoader(list(range(10)), batch_size=5, sampler=sampler)

    def draws(prepare):
        user_generator.manual_seed(3)
        torch.manual_seed(0)
        used = prepare_data_loader(loader, num_processes=1, process_index=0) if prepare else loader
        assert get_sampler(used).generator is user_generator
        return [ids(used), ids(used)], user_generator.get_state(), torch.get_rng_state()

    plain, prepared = draws(False), draws(True)
    assert prepared[0] == plain[0] and prepared[0][0] != prepared[0][1]
    assert torch.equal(prepared[1], plain[1]) and torch.equal(prepared[2], plain[2])
    assert get_sampler(prepare_data_loader(loader, num_processes=1, process_index=0)) is not sampler


def test_set_epoch_forwarding_and_replay():
    dataset = Stream(8)
    loader = prepare_data_loader(DataLoader(dataset, batch_size=2), num_processes=1, process_index=0)
    ids(loader)
    ids(loader)
    loader.set_epoch(7)
    ids(loader)
    assert dataset.epochs == [0, 1, 7, 7] and loader.iteration == 8  # forwarded at once, and as the pass starts

    torch.manual_seed(0)
    shuffled = prepare_data_loader(DataLoader(list(range(12)), batch_size=3, shuffle=True), num_processes=1,
                                   process_index=0, use_seedable_sampler=True)
    first = ids(shuffled)
    ids(shuffled)
    shuffled.set_epoch(0)
    assert ids(shuffled) == first


def test_an_abandoned_pass_moves_on_to_the_next_epoch():
    torch.manual_seed(0)
    loader = prepare_data_loader(DataLoader(list(range(12)), batch_size=3, shuffle=True), num_processes=1,
                                 process_index=0)
    for _ in loader:
        break
    assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["batches_yielded"] == 1
    assert GradientState().active_dataloader is None
    loader.set_epoch(1)
    epoch_one = ids(loader)
    torch.manual_seed(0)
    other = prepare_data_loader(DataLoader(list(range(12)), batch_size=3, shuffle=True), num_processes=1,
                                process_index=0)
    for _ in other:
        break
    assert ids(other) == epoch_one


@pytest.mark.parametrize("iterable", [False, True])
def test_state_dict_resumes_at_the_next_unseen_batch(iterable):
    def make():
        torch.manual_seed(4)
        dataset = Stream(20) if iterable else list(range(20))
        return [prepare_data_loader(DataLoader(dataset, batch_size=2, shuffle=not iterable), num_processes=2,
                                    process_index=i) for i in range(2)]

    reference = make()
    straight = [ids(loader) + ids(loader) for loader in reference]
    resumed = []
    for index, loader in enumerate(make()):
        iterator = iter(loader)
        for _ in range(3):
            next(iterator)
        saved = loader.state_dict()
        del iterator
        fresh = make()[index]
        torch.manual_seed(123)
        fresh.load_state_dict(saved)
        resumed.append(ids(fresh) + ids(fresh))
        assert saved["batches_yielded"] == 3 and saved["num_processes"] == 2
    assert [r for r in resumed] == [s[3:] for s in straight]


def test_load_state_dict_refuses_foreign_or_newer_states():
    loader = prepare_data_loader(DataLoader(list(range(4)), batch_size=2), num_processes=1, process_index=0)
    with pytest.raises(ConfigError, match="missing"):
        loader.load_state_dict({"_num_yielded": 3})
    with pytest.raises(ConfigError, match="upgrade"):
        loader.load_state_dict({"format": 99, "epoch": 0, "batches_yielded": 0, "seed": 0})


def test_load_state_dict_converts_a_position_saved_with_another_batch_size():
    loader = prepare_data_loader(DataLoader(list(range(32)), batch_size=4), num_processes=1, process_index=0)
    loader.load_state_dict({"epoch": 0, "batches_yielded": 2, "seed": 0, "total_batch_size": 8})
    assert ids(loader)[0] == [16, 17, 18, 19]


def test_skip_first_batches_on_prepared_and_plain_loaders():
    torch.manual_seed(2)
    loader = prepare_data_loader(DataLoader(list(range(20)), batch_size=2, shuffle=True), num_processes=2,
                                 process_index=1, use_seedable_sampler=True)
    full = ids(loader)
    loader.set_epoch(0)
    skipped = skip_first_batches(loader, 2)
    assert isinstance(skipped, DataLoaderShard) and len(skipped) == len(full) - 2
    assert ids(skipped) == full[2:]
    assert loader.iteration == 1  # the original goes on with the next epoch

    plain = DataLoader(list(range(10)), batch_size=3)
    skip_plain = skip_first_batches(plain, 2)
    assert isinstance(skip_plain.batch_sampler, SkipBatchSampler) and ids(skip_plain) == [[6, 7, 8], [9]]
    stream = skip_first_batches(DataLoader(Stream(10), batch_size=3), 1)
    assert isinstance(stream, SkipDataLoader) and ids(stream) == [[3, 4, 5], [6, 7, 8], [9]] and len(stream) == 3


def test_iterable_prepared_loader_and_remainder():
    loaders = [prepare_data_loader(DataLoader(Stream(10), batch_size=2), num_processes=2, process_index=i)
               for i in range(2)]
    assert isinstance(loaders[0].dataset, IterableDatasetShard)
    assert ids(loaders[0]) == [[0, 1], [4, 5], [8, 9]] and ids(loaders[1]) == [[2, 3], [6, 7], [0, 1]]
    state = GradientState()
    remainders = [loaders[0].remainder for _ in loaders[0] if state.end_of_dataloader]
    assert remainders == [2]
    unsized = prepare_data_loader(DataLoader(Stream(10, sized=False), batch_size=2), num_processes=2, process_index=0)
    assert [unsized.remainder for _ in unsized if state.end_of_dataloader] == [-1]


def test_a_dispatched_loader_s_last_batch_sets_the_remainder_gather_for_metrics_cuts_to():
    """As Accelerate's dispatcher: the last batch's size is the remainder, padded or not, so a
    value repeated per sample of a full batch (transformers' eval loss) is cut to the real ones."""
    from drivetrain import Accelerator
    from drivetrain.utils import DataLoaderConfiguration

    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=True))
    loader = accelerator.prepare(DataLoader(Stream(10), batch_size=4))
    kept = []
    for batch in loader:
        repeated = torch.full((4,), float(len(batch)))  # one value per sample of a full batch
        kept.append(accelerator.gather_for_metrics(repeated))
        if accelerator.gradient_state.end_of_dataloader:
            assert accelerator.gradient_state.remainder == 2
    assert [len(values) for values in kept] == [4, 4, 2] and float(torch.cat(kept).sum()) == 4 * 4 * 2 + 2 * 2


def test_loaders_without_batching_and_with_a_batch_sampler_as_sampler():
    one_by_one = [prepare_data_loader(DataLoader(list(range(5)), batch_size=None), num_processes=2, process_index=i)
                  for i in range(2)]
    assert [[int(x) for x in loader] for loader in one_by_one] == [[0, 2, 4], [1, 3, 0]]

    class Indexable(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, indices):
            return torch.tensor(indices)

    sampler = BatchSampler(RandomSampler(range(8)), 2, False)
    loaders = [on_process(i, dataloader=DataLoader(Indexable(), sampler=sampler, batch_size=None)) for i in range(2)]
    seen = sorted(i for loader in loaders for batch in loader for i in batch.tolist())
    assert seen == list(range(8))


def test_device_placement_collate_and_worker_arguments_are_kept():
    def collate(samples):
        return {"x": torch.tensor(samples)}

    loader = DataLoader(list(range(6)), batch_size=3, collate_fn=collate, num_workers=0, pin_memory=False)
    prepared = prepare_data_loader(loader, device="meta", put_on_device=True, num_processes=1, process_index=0)
    out = list(prepared)
    assert out[0]["x"].device.type == "meta" and prepared.collate_fn is collate
    kept = prepare_data_loader(loader, device="meta", put_on_device=False, num_processes=1, process_index=0)
    assert next(iter(kept))["x"].device.type == "cpu"


def test_dataloader_workers_get_reproducible_seeds():
    def worker_seed(_):
        return torch.tensor([torch.initial_seed()])

    def seeds():
        torch.manual_seed(0)
        loader = DataLoader(list(range(4)), batch_size=2, num_workers=1, collate_fn=worker_seed)
        prepared = prepare_data_loader(loader, num_processes=1, process_index=0)
        return [ids(prepared), ids(prepared)]

    first = seeds()
    assert first == seeds() and first[0] != first[1]


def test_dispatch_needs_device_placement_and_split_needs_a_multiple():
    with pytest.raises(ConfigError, match="put_on_device"):
        prepare_data_loader(DataLoader(Stream(4)), num_processes=1, process_index=0, dispatch_batches=True)
    with pytest.raises(ConfigError, match="multiple"):
        prepare_data_loader(DataLoader(list(range(9)), batch_size=3), num_processes=2, process_index=0,
                            split_batches=True)


def test_seedable_random_sampler():
    sampler = SeedableRandomSampler(range(10), data_seed=3)
    first, second = list(sampler), list(sampler)
    assert first != second and sorted(first) == list(range(10)) and sampler.epoch == 2
    sampler.set_epoch(0)
    assert list(sampler) == first
    other = SeedableRandomSampler(range(10), data_seed=3)
    other.load_state_dict({"epoch": 1, "initial_seed": 3})
    assert list(other) == second and other.state_dict() == {"epoch": 2, "initial_seed": 3}


@pytest.mark.parametrize("use_seedable_sampler", [False, True])
def test_a_users_seedable_sampler_keeps_its_seed_and_generator_when_prepared(use_seedable_sampler):
    # the sampler's own seed (not its generator's initial seed, nor torch's) orders every epoch,
    # so a prepared loader replays the order the plain one gives
    data = list(range(32))
    generator = torch.Generator()
    torch.manual_seed(7)
    plain = DataLoader(data, batch_size=4, sampler=SeedableRandomSampler(data, generator=generator, data_seed=11))
    expected = [[b.tolist() for b in plain] for _ in range(3)]
    sampler = SeedableRandomSampler(data, generator=generator, data_seed=11)
    assert sampler.generator is generator
    loader = prepare_data_loader(DataLoader(data, batch_size=4, sampler=sampler), num_processes=1, process_index=0,
                                 use_seedable_sampler=use_seedable_sampler)
    torch.manual_seed(8)
    generator.manual_seed(99)
    assert [[b.tolist() for b in loader] for _ in range(3)] == expected


def test_dataloader_configuration_fields_match():
    from drivetrain.utils import DataLoaderConfiguration

    config = DataLoaderConfiguration()
    assert (config.split_batches, config.dispatch_batches, config.even_batches, config.use_seedable_sampler,
            config.non_blocking, config.use_stateful_dataloader) == (False, None, True, False, False, False)


def test_counts_per_process_with_uneven_batches_are_documented():
    counts = collections.Counter()
    for i in range(2):
        counts[i] = len(prepare_data_loader(DataLoader(list(range(10)), batch_size=4), num_processes=2,
                                            process_index=i, even_batches=False))
    assert counts == {0: 2, 1: 1}


def test_public_names():
    import drivetrain

    assert drivetrain.skip_first_batches is skip_first_batches
    assert drivetrain.prepare_data_loader is prepare_data_loader


def test_reading_a_random_sampler_at_once_gives_its_own_order():
    from drivetrain.data_loader import _all_indices

    for length in (1, 7, 1000):
        ours = RandomSampler(range(length), generator=torch.Generator().manual_seed(5))
        theirs = RandomSampler(range(length), generator=torch.Generator().manual_seed(5))
        assert _all_indices(ours) == list(theirs)


# ------------------------------------------------------------- epochs of samplers


class EpochBatchSampler(BatchSampler):
    """A custom batch sampler that reads its epoch when iterated."""

    def __init__(self, sampler, batch_size):
        super().__init__(sampler, batch_size, False)
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch


def test_set_epoch_reaches_the_users_batch_sampler_and_its_sampler():
    data = list(range(16))
    sampler = SeedableRandomSampler(data)
    custom = EpochBatchSampler(sampler, 4)
    loader = prepare_data_loader(DataLoader(data, batch_sampler=custom), num_processes=1, process_index=0)
    loader.set_epoch(3)
    assert custom.epoch == 3


@pytest.mark.parametrize("dispatch", [False, True])
def test_a_directly_built_loader_passes_its_epoch_to_its_samplers_after_a_skip(dispatch):
    from drivetrain.data_loader import DataLoaderDispatcher

    data = list(range(16))
    sampler = SeedableRandomSampler(data)
    custom = EpochBatchSampler(sampler, 4)
    loader = (DataLoaderDispatcher if dispatch else DataLoaderShard)(data, batch_sampler=custom)
    loader.set_epoch(2)
    resumed = skip_first_batches(loader, 1)
    next(iter(resumed))
    assert (resumed.iteration, custom.epoch, sampler.epoch) == (2, 2, 2)


# ------------------------------------------------------ use_stateful_dataloader=True


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_loaders_are_torchdata_loaders_with_its_state(num_workers):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    from drivetrain.data_loader import DataLoaderDispatcher

    data = list(range(40))
    reference = stateful.StatefulDataLoader(data, batch_size=4, num_workers=num_workers,
                                            generator=torch.Generator().manual_seed(1))
    loaders = [cls(data, batch_size=4, num_workers=num_workers, generator=torch.Generator().manual_seed(1),
                   use_stateful_dataloader=True) for cls in (DataLoaderShard, DataLoaderDispatcher, SkipDataLoader)]
    for loader in [reference, *loaders]:
        assert isinstance(loader, stateful.StatefulDataLoader)
        for index, _ in enumerate(loader):
            if index == 2:  # three batches handed out; a prepared loader has read a fourth
                break
    expected = reference.state_dict()
    for loader in loaders:
        assert loader.state_dict() == expected and loader.base_dataloader is loader
        resumed = type(loader)(data, batch_size=4, num_workers=num_workers, use_stateful_dataloader=True)
        resumed.load_state_dict(expected)
        assert [batch.tolist()[0] for batch in resumed] == list(range(12, 40, 4))
    assert GradientState().active_dataloader is None


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield from range(12)


@pytest.mark.parametrize("dispatch", [False, True])
def test_a_stateful_loader_reports_the_state_it_loaded_until_it_hands_out_a_batch(dispatch):
    """save_state after load_state, the loader untouched in between (another loader trained):
    the loaded position is saved again, even an exhausted pass's that torchdata cannot replay."""
    pytest.importorskip("torchdata.stateful_dataloader")
    loader = prepare_data_loader(DataLoader(_Stream(), batch_size=4), num_processes=1, process_index=0,
                                 put_on_device=dispatch, dispatch_batches=dispatch, use_stateful_dataloader=True)
    assert [batch.tolist()[0] for batch in loader] == [0, 4, 8]
    finished = loader.state_dict()
    loader.load_state_dict(finished)
    assert loader.state_dict() == finished
    assert [batch.tolist()[0] for batch in loader] == [0, 4, 8]  # the next pass is a new epoch


def test_stateful_prepared_loaders_skip_and_pickle():
    import pickle

    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    for dispatch in (False, True):
        loader = prepare_data_loader(DataLoader(list(range(16)), batch_size=4), num_processes=1, process_index=0,
                                     put_on_device=dispatch, dispatch_batches=dispatch, use_stateful_dataloader=True)
        skipped = skip_first_batches(loader, 2)
        assert isinstance(loader, stateful.StatefulDataLoader) and isinstance(skipped, stateful.StatefulDataLoader)
        assert [batch.tolist() for batch in skipped] == [[8, 9, 10, 11], [12, 13, 14, 15]]
        copy = pickle.loads(pickle.dumps(loader))
        assert isinstance(copy, type(loader)) and [batch.tolist()[0] for batch in copy] == [0, 4, 8, 12]
    plain = prepare_data_loader(DataLoader(list(range(8)), batch_size=2), num_processes=1, process_index=0)
    assert not isinstance(plain, stateful.StatefulDataLoader) and "epoch" in plain.state_dict()
    with pytest.raises(AttributeError):
        DataLoaderShard.base_dataloader  # noqa: B018 (an instance's, not the class's)
