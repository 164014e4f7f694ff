"""find_executable_batch_size: which sizes it tries, and how it ends."""

from __future__ import annotations

import pytest
import torch

from drivetrain.errors import ConfigError, NoExecutableBatchSizeError
from drivetrain.services import memory
from drivetrain.utils.memory import find_executable_batch_size


@pytest.fixture(autouse=True)
def collections(monkeypatch):
    """The garbage collections asked for: counted, not run. A full collection of this test
    process's heap (torch, transformers and every test module) takes most of a second, and
    the decorator asks for one before the first try and after each failed one."""
    calls = []
    monkeypatch.setattr(memory.gc, "collect", lambda *args: calls.append(args) or 0)
    return calls


def _fits_at(limit, tried):
    def train(batch_size, scale=1):
        tried.append(batch_size)
        if batch_size > limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return batch_size * scale
    return train


def test_each_retry_shrinks_the_size_by_a_tenth_and_keeps_the_one_that_fit(collections):
    tried = []
    train = find_executable_batch_size(_fits_at(20, tried), starting_batch_size=32)
    assert train(3) == 19 * 3
    expected = [32]
    while expected[-1] > 20:
        expected.append(int(expected[-1] * 0.9))
    assert tried == expected and expected[-1] == 19
    # what each failed try left is freed before the next: once at the start, once per failure
    assert len(collections) == len(tried)
    tried.clear()
    assert train(1) == 19 and tried == [19]  # the next call starts where the last one fitted


def test_reaching_zero_raises_a_runtime_error_chained_to_the_last_out_of_memory():
    tried = []
    train = find_executable_batch_size(_fits_at(0, tried), starting_batch_size=4)
    with pytest.raises(NoExecutableBatchSizeError, match="No executable batch size found, reached zero. "
                                                         "Even a batch of 1") as caught:
        train()
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value.__cause__, torch.OutOfMemoryError)
    assert tried == [4, 3, 2, 1]


def test_starting_at_zero_never_calls_the_function():
    tried = []
    train = find_executable_batch_size(_fits_at(100, tried), starting_batch_size=0)
    with pytest.raises(RuntimeError, match="reached zero. starting_batch_size is 0"):
        train()
    assert tried == []


def test_reduce_function_without_or_with_the_failed_size():
    sizes = iter([10, 5])
    tried = []
    train = find_executable_batch_size(_fits_at(5, tried), starting_batch_size=16,
                                       reduce_batch_size_fn=lambda: next(sizes))  # Accelerate's form
    assert train() == 5 and tried == [16, 10, 5]
    tried = []
    train = find_executable_batch_size(_fits_at(5, tried), starting_batch_size=16,
                                       reduce_batch_size_fn=lambda size: size // 2)
    assert train() == 4 and tried == [16, 8, 4]


def test_a_reduce_function_that_does_not_shrink_is_refused_instead_of_looping():
    train = find_executable_batch_size(_fits_at(1, []), starting_batch_size=8, reduce_batch_size_fn=lambda: 8)
    with pytest.raises(ConfigError, match="must return a smaller int"):
        train()


def test_other_errors_propagate_at_once():
    tried = []

    @find_executable_batch_size(starting_batch_size=8)
    def broken(batch_size):
        tried.append(batch_size)
        raise ValueError("not memory")

    with pytest.raises(ValueError, match="not memory"):
        broken()
    assert tried == [8]
