"""``prepare_data_loader(torch_device_mesh=...)`` and the loaders' Accelerate parameters."""

from __future__ import annotations

import re

import pytest
from launching import assert_ok, launch


@pytest.mark.usefixtures("fresh_state")
def test_iteration_starts_the_loader_at_that_epoch():
    from drivetrain.data_loader import DataLoaderDispatcher, DataLoaderShard

    assert DataLoaderShard(list(range(4)), batch_size=2).iteration == 0
    assert DataLoaderShard(list(range(4)), batch_size=2, iteration=3).iteration == 3
    dispatcher = DataLoaderDispatcher(list(range(4)), batch_size=2, iteration=2)
    assert dispatcher.iteration == 2 and dispatcher.torch_device_mesh is None
    assert [b.tolist() for b in DataLoaderShard(list(range(4)), batch_size=2, iteration=7)] == [[0, 1], [2, 3]]


@pytest.mark.multiprocess
def test_a_device_mesh_gives_tensor_parallel_peers_the_same_batches():
    result = launch("check_mesh_loader.py", num_processes=4)
    assert_ok(result)
    assert sorted(re.findall(r"CHECK-MESH-LOADER-OK rank (\d)", result.stdout)) == ["0", "1", "2", "3"], result.stdout
