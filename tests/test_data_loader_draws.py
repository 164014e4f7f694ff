"""A prepared loader draws the random numbers a plain torch loader draws, and replays them on resume."""

import pytest
import torch
from torch.utils.data import DataLoader

from drivetrain.data_loader import prepare_data_loader, skip_first_batches
from drivetrain.errors import ConfigError


def ids(loader):
    return [batch.tolist() for batch in loader]


def epochs(loader, count=3):
    """``count`` passes, with a draw from the global generator after each batch (dropout's place)."""
    seen, masks = [], []
    for _ in range(count):
        for batch in loader:
            seen.append(batch.tolist())
            masks.append(torch.rand(2).tolist())
    return seen, masks


@pytest.mark.parametrize("options", [dict(shuffle=True), dict(shuffle=True, drop_last=True), dict(shuffle=False),
                                     dict(shuffle=True, num_workers=1),
                                     dict(shuffle=True, num_workers=1, persistent_workers=True)])
def test_one_process_matches_a_plain_loader_under_the_same_seed(options):
    def run(prepare):
        torch.manual_seed(42)
        loader = DataLoader(list(range(23)), batch_size=4, **options)
        if prepare:
            loader = prepare_data_loader(loader, num_processes=1, process_index=0)
        return epochs(loader, 2 if options.get("num_workers") else 3), torch.get_rng_state()

    (plain, plain_state), (prepared, prepared_state) = run(False), run(True)
    assert prepared == plain
    assert torch.equal(prepared_state, plain_state)


def test_a_loader_generator_is_drawn_from_as_a_plain_loader_draws_from_it():
    generator = torch.Generator()

    def run(prepare):
        torch.manual_seed(1)
        generator.manual_seed(7)
        loader = DataLoader(list(range(10)), batch_size=3, shuffle=True, generator=generator)
        if prepare:
            loader = prepare_data_loader(loader, num_processes=1, process_index=0)
        return epochs(loader), generator.get_state(), torch.get_rng_state()

    plain, prepared = run(False), run(True)
    assert prepared[0] == plain[0]
    assert torch.equal(prepared[1], plain[1]) and torch.equal(prepared[2], plain[2])


def test_seedable_shuffling_draws_only_the_loaders_base_seed_from_the_global_generator():
    torch.manual_seed(3)
    loader = prepare_data_loader(DataLoader(list(range(10)), batch_size=5, shuffle=True), num_processes=1,
                                 process_index=0, use_seedable_sampler=True, data_seed=11)
    orders = [ids(loader), ids(loader)]
    after = torch.get_rng_state()
    torch.manual_seed(3)
    base_seeds = [torch.empty((), dtype=torch.int64).random_() for _ in range(2)]
    assert len(base_seeds) == 2 and torch.equal(after, torch.get_rng_state())
    expected = [torch.randperm(10, generator=torch.Generator().manual_seed(11 + epoch)).tolist() for epoch in range(2)]
    assert [sum(order, []) for order in orders] == expected


@pytest.mark.parametrize("processes", [1, 2])
def test_a_resumed_pass_replays_the_order_and_leaves_the_global_generator_as_saved(processes):
    def make(index):
        torch.manual_seed(5)
        return prepare_data_loader(DataLoader(list(range(30)), batch_size=3, shuffle=True),
                                   num_processes=processes, process_index=index)

    for index in range(processes):
        straight = make(index)
        reference = epochs(straight, 2), torch.get_rng_state()

        interrupted = make(index)
        iterator = iter(interrupted)
        seen = [next(iterator).tolist() for _ in range(2)]
        masks = [torch.rand(2).tolist() for _ in range(2)]
        saved, saved_rng = interrupted.state_dict(), torch.get_rng_state()
        del iterator

        resumed = make(index)
        torch.manual_seed(99)  # whatever the new process drew before load_state restores the random states
        resumed.load_state_dict(saved)
        torch.set_rng_state(saved_rng)
        rest = epochs(resumed, 1)
        second = epochs(resumed, 1)
        assert seen + rest[0] + second[0] == reference[0][0]
        assert masks + rest[1] + second[1] == reference[0][1]
        assert torch.equal(torch.get_rng_state(), reference[1])


def test_skip_first_batches_after_a_restore_replays_the_restored_epoch():
    torch.manual_seed(8)
    loader = prepare_data_loader(DataLoader(list(range(12)), batch_size=2, shuffle=True), num_processes=1,
                                 process_index=0)
    iterator = iter(loader)
    first = [next(iterator).tolist() for _ in range(6)]
    saved = loader.state_dict()
    saved["batches_yielded"] = 0
    del iterator
    torch.manual_seed(0)
    fresh = prepare_data_loader(DataLoader(list(range(12)), batch_size=2, shuffle=True), num_processes=1,
                                process_index=0)
    fresh.load_state_dict(saved)
    assert ids(skip_first_batches(fresh, 2)) == first[2:]


def test_a_draws_record_that_cannot_be_replayed_is_refused_before_the_position_changes():
    torch.manual_seed(0)
    loader = prepare_data_loader(DataLoader(list(range(12)), batch_size=2, shuffle=True), num_processes=1,
                                 process_index=0)
    iterator = iter(loader)
    next(iterator)
    saved = loader.state_dict()
    del iterator
    saved["draws"]["loader"] = torch.zeros(3, dtype=torch.uint8)
    fresh = prepare_data_loader(DataLoader(list(range(12)), batch_size=2, shuffle=True), num_processes=1,
                                process_index=0)
    with pytest.raises(ConfigError, match="generator state"):
        fresh.load_state_dict(saved)
    assert fresh.state_dict()["batches_yielded"] == 0
