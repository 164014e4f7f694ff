"""Launched on 2 processes: every operation of drivetrain.utils across real processes.

Each check compares with what the other rank is known to hold (rank r fills its tensors
from r). Prints CHECK-OPERATIONS-OK at the end.
"""

from __future__ import annotations

import collections
import random
import time

import numpy
import torch

from drivetrain.errors import DistributedError, UnsupportedDataError
from drivetrain.state import PartialState
from drivetrain.utils import (
    DistributedOperationException,
    broadcast,
    broadcast_object_list,
    gather,
    gather_for_metrics,
    gather_object,
    pad_across_processes,
    reduce,
    set_seed,
    synchronize_rng_state,
    synchronize_rng_states,
    wait_for_everyone,
)

torch.set_num_threads(1)
state = PartialState()
RANK, WORLD = state.process_index, state.num_processes
assert WORLD == 2, WORLD
Pair = collections.namedtuple("Pair", ["left", "right"])
SHAPES = [(), (3,), (2, 3), (2, 1, 4)]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.uint8, torch.bool]


def filled(shape, dtype, rank):
    values = torch.arange(int(torch.tensor(shape).prod()) if shape else 1).reshape(shape) + 10 * rank
    return (values % 2 == rank) if dtype == torch.bool else values.to(dtype)


def check_gather_shapes_and_dtypes():
    for shape in SHAPES:
        for dtype in DTYPES:
            mine = filled(shape, dtype, RANK)
            got = gather(mine)
            parts = [filled(shape, dtype, r).reshape(-1 if not shape else shape[0], *shape[1:]) for r in range(WORLD)]
            expected = torch.cat([p.reshape(1) if not shape else p for p in parts])
            assert got.dtype == dtype and torch.equal(got, expected), (shape, dtype, got, expected)
    non_contiguous = filled((3, 4), torch.float32, RANK).t()
    assert torch.equal(gather(non_contiguous), torch.cat([filled((3, 4), torch.float32, r).t() for r in range(WORLD)]))


def check_gather_nested():
    data = {"a": filled((2,), torch.float32, RANK), "b": [filled((1, 2), torch.int64, RANK), (filled((), torch.float16, RANK),)],
            "c": Pair(filled((2, 2), torch.bfloat16, RANK), filled((1,), torch.bool, RANK))}
    got = gather(data)
    assert set(got) == {"a", "b", "c"} and isinstance(got["b"], list) and isinstance(got["b"][1], tuple)
    assert isinstance(got["c"], Pair)
    assert torch.equal(got["a"], torch.cat([filled((2,), torch.float32, r) for r in range(WORLD)]))
    assert torch.equal(got["b"][0], torch.cat([filled((1, 2), torch.int64, r) for r in range(WORLD)]))
    assert got["b"][1][0].shape == (2,)
    assert torch.equal(got["c"].left, torch.cat([filled((2, 2), torch.bfloat16, r) for r in range(WORLD)]))
    for not_tensors in ({"a": torch.ones(1), "b": "text"}, "a string"):
        try:
            gather(not_tensors)
        except UnsupportedDataError as error:  # our own type, still a TypeError
            assert isinstance(error, TypeError) and "gather_object" in str(error) and "\n" not in str(error)
        else:
            raise AssertionError(f"gather accepted {not_tensors!r}")


def check_broadcast():
    for source in range(WORLD):
        for shape in SHAPES:
            for dtype in DTYPES:
                mine = filled(shape, dtype, RANK)
                result = broadcast(mine, from_process=source)
                assert result is mine and torch.equal(mine, filled(shape, dtype, source)), (source, shape, dtype)
        nested = [filled((2,), torch.float32, RANK), {"k": Pair(filled((3,), torch.int64, RANK), filled((), torch.float16, RANK))}]
        out = broadcast(nested, from_process=source)
        assert torch.equal(out[0], filled((2,), torch.float32, source))
        assert torch.equal(out[1]["k"].left, filled((3,), torch.int64, source)) and isinstance(out[1]["k"], Pair)
    view = torch.zeros(4, 4)[:, 1]  # not contiguous: the result must land in the view
    if RANK == 0:
        view.copy_(torch.arange(4.0))
    broadcast(view)
    assert torch.equal(view, torch.arange(4.0))


def check_reduce():
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int16):
        for shape in SHAPES:
            mine = filled(shape, dtype, RANK)
            before = mine.clone()
            total = reduce(mine, "sum")
            assert torch.equal(mine, before), "reduce changed its input"
            assert torch.equal(total, filled(shape, dtype, 0) + filled(shape, dtype, 1)), (dtype, shape, total)
    mean = reduce({"x": torch.tensor([1.0, 3.0]) * (RANK + 1), "y": [torch.tensor(2.0 * RANK)]}, reduction="mean")
    assert torch.allclose(mean["x"], torch.tensor([1.5, 4.5])) and torch.allclose(mean["y"][0], torch.tensor(1.0))
    scaled = reduce(torch.tensor([1.0, 2.0]), reduction="sum", scale=0.5)
    assert torch.allclose(scaled, torch.tensor([1.0, 2.0]))
    assert torch.equal(reduce(torch.tensor([RANK + 1]), "max"), torch.tensor([2]))


def check_pad_then_gather_uneven():
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        length = 3 if RANK == 0 else 5
        mine = torch.arange(length).to(dtype) + 1
        padded = pad_across_processes(mine, pad_index=-1)
        assert padded.shape == (5,)
        gathered = gather(padded)
        expected = torch.tensor([1, 2, 3, -1, -1, 1, 2, 3, 4, 5]).to(dtype)
        assert torch.equal(gathered, expected), (dtype, gathered)
        assert torch.equal(gathered[gathered != -1], torch.tensor([1, 2, 3, 1, 2, 3, 4, 5]).to(dtype))
    first = pad_across_processes(torch.ones(2 + RANK, 2), pad_first=True)
    assert torch.equal(first, torch.ones(3, 2) if RANK else torch.cat([torch.zeros(1, 2), torch.ones(2, 2)]))
    wide = pad_across_processes(torch.ones(2, 1 + 2 * RANK), dim=1, pad_index=7)
    assert wide.shape == (2, 3) and (RANK == 1 or torch.equal(wide[:, 1:], torch.full((2, 2), 7.0)))
    nested = pad_across_processes({"ids": torch.ones(1 + RANK, dtype=torch.int64), "mask": [torch.ones(3 - RANK, 2)],
                                   "scalar": torch.tensor(1.0)})
    assert nested["ids"].shape == (2,) and nested["mask"][0].shape == (3, 2) and nested["scalar"].shape == ()
    assert gather(nested)["mask"][0].shape == (6, 2)
    same = torch.ones(4)
    assert pad_across_processes(same) is same


def check_tensors_that_require_grad():
    """A parameter, or a result of it, goes through every operation as its data would."""
    weight = torch.nn.Parameter(filled((2, 3), torch.float32, RANK))
    expected = torch.cat([filled((2, 3), torch.float32, r) for r in range(WORLD)])
    for got in (gather(weight), gather_for_metrics(weight), gather({"w": [weight * 1]})["w"][0]):
        assert torch.equal(got, expected) and not got.requires_grad, got
    assert torch.equal(gather(torch.nn.Parameter(torch.tensor(float(RANK)))), torch.tensor([0.0, 1.0]))
    assert torch.equal(reduce(weight, "sum"), filled((2, 3), torch.float32, 0) + filled((2, 3), torch.float32, 1))
    assert torch.equal(weight, filled((2, 3), torch.float32, RANK)), "reduce changed its input"
    padded = pad_across_processes(torch.nn.Parameter(torch.ones(2 + RANK)), pad_index=-1)
    assert padded.tolist() == ([1.0, 1.0, -1.0] if RANK == 0 else [1.0, 1.0, 1.0])
    column = weight.t()[1]  # a view of a parameter, not contiguous
    assert broadcast(column, from_process=1) is column and weight.requires_grad
    assert torch.equal(weight[:, 1], filled((2, 3), torch.float32, 1)[:, 1])
    assert torch.equal(broadcast(weight, from_process=1), filled((2, 3), torch.float32, 1))


def check_object_collectives():
    objects = gather_object([{"rank": RANK, "text": "x" * RANK}])
    assert objects == [{"rank": 0, "text": ""}, {"rank": 1, "text": "x"}], objects
    assert gather_object([RANK, RANK * 10]) == [0, 0, 1, 10]
    assert gather_object({"rank": RANK}) == [{"rank": 0}, {"rank": 1}]
    payload = [{"config": [1, 2, 3]}, "name", None] if RANK == 1 else [None, None, None]
    result = broadcast_object_list(payload, from_process=1)
    assert result is payload and payload == [{"config": [1, 2, 3]}, "name", None]


def check_rng():
    set_seed(1234)
    draws = gather_object([(random.random(), float(numpy.random.rand()), float(torch.rand(1)))])
    assert draws[0] == draws[1], draws
    set_seed(1234, device_specific=True)
    assert gather_object([float(torch.rand(1))])[0] != gather_object([float(torch.rand(1))])[1]
    torch.manual_seed(100 + RANK)
    synchronize_rng_state("torch")
    values = gather_object([float(torch.rand(1))])
    assert values[0] == values[1], values
    generator = torch.Generator().manual_seed(RANK)
    synchronize_rng_states(["torch", "generator"], generator=generator)
    values = gather_object([float(torch.rand(1, generator=generator))])
    assert values[0] == values[1], values
    synchronize_rng_state(state.platform.name)  # the device generator: nothing to do on CPU, must not fail


def expect_mismatch(call, *fragments):
    """``call`` raises DistributedOperationException on this rank, in one line holding ``fragments``."""
    try:
        call()
    except DistributedOperationException as error:
        message = str(error)
        assert isinstance(error, DistributedError)
        assert "\n" not in message and all(fragment in message for fragment in fragments), (fragments, message)
    else:
        raise AssertionError(f"no error for a mismatch expected to name {fragments}")


def check_debug_mode_names_each_rank():
    from drivetrain import Accelerator

    accelerator = Accelerator()
    state.debug = True
    each_rank = ("rank 0:", "rank 1:", "(debug mode)")
    ragged = torch.arange(3.0 if RANK == 0 else 5.0)
    try:
        start = time.monotonic()
        for operation, call in (
                ("gather", lambda: gather(torch.arange(4).to(torch.float32 if RANK == 0 else torch.int64))),
                ("gather", lambda: gather(torch.arange(4.0).reshape([4] if RANK == 0 else [2, 2]))),
                ("gather", lambda: gather(torch.ones(2 + RANK, 3))),
                ("gather", lambda: gather_for_metrics(ragged)),
                ("reduce", lambda: reduce({"x": torch.ones(2, dtype=torch.float32 if RANK else torch.int64)})),
                ("reduce", lambda: reduce(ragged, "sum")),
                ("broadcast", lambda: broadcast([torch.ones(2)] * (1 + RANK))),
                ("broadcast", lambda: broadcast(ragged)),
                ("pad_across_processes", lambda: pad_across_processes(torch.ones((2,) * (1 + RANK))))):
            expect_mismatch(call, f"{operation}()", *each_rank)
        expect_mismatch(lambda: gather_for_metrics(ragged), "in gather_for_metrics(): gather()", *each_rank)
        expect_mismatch(lambda: accelerator.gather(ragged), "gather()", *each_rank)
        expect_mismatch(lambda: accelerator.gather_for_metrics(ragged), "gather_for_metrics()", *each_rank)
        expect_mismatch(lambda: accelerator.reduce(ragged), "reduce()", *each_rank)
        expect_mismatch(lambda: accelerator.pad_across_processes([ragged] * (1 + RANK)), "pad_across_processes()",
                        *each_rank)
        gathered = gather(torch.ones(2, 3) * RANK)  # matching calls still work in debug mode
        assert gathered.shape == (4, 3)
        assert torch.equal(accelerator.reduce(torch.ones(2) * RANK), torch.ones(2))
        assert time.monotonic() - start < 20
    finally:
        state.debug = False


def check_large_layout_mismatch_outside_debug_mode():
    """Tensors of the same size but other shapes would gather into a wrong result: from
    LAYOUT_CHECK_BYTES on (CPU) their layouts are compared, debug mode or not."""
    from drivetrain.services.cross_process import LAYOUT_CHECK_BYTES

    assert not state.debug
    elements = LAYOUT_CHECK_BYTES // 4
    flat = torch.zeros(elements)
    mine = flat if RANK == 0 else flat.reshape(elements // 2, 2)
    digests = ("rank 0: [%d] float32" % elements, "rank 1: [%d, 2] float32" % (elements // 2), "(their layout digests)")
    expect_mismatch(lambda: gather(mine), "gather()", *digests)
    expect_mismatch(lambda: reduce(mine, "sum"), "reduce()", *digests)
    assert gather(flat).shape == (2 * elements,)  # matching large gathers still work


def check_pad_mismatch_outside_debug_mode():
    """pad_across_processes exchanges sizes anyway: a different layout fails on every rank."""
    assert not state.debug
    layout = "pad_across_processes() needs the same structure, number of dimensions and dtypes"
    for call in (lambda: pad_across_processes(torch.ones((2,) * (1 + RANK))),
                 lambda: pad_across_processes([torch.ones(2)] * (1 + RANK)),
                 lambda: pad_across_processes(torch.ones(2, dtype=torch.float32 if RANK == 0 else torch.int64)),
                 lambda: pad_across_processes({"ids" if RANK == 0 else "mask": torch.ones(2)}),
                 lambda: pad_across_processes([torch.ones(2)] * RANK),
                 lambda: pad_across_processes([torch.ones(2)] * (15 + RANK))):
        expect_mismatch(call, layout, "rank 1 passed a different layout from rank 0", "--debug (ACCELERATE_DEBUG_MODE=1)")
    many = pad_across_processes([torch.ones(1 + (i + RANK) % 3) for i in range(20)], pad_index=-1)
    # more sizes than the first exchange carries: the rest come in a second one
    assert [t.shape[0] for t in many] == [max(1 + i % 3, 1 + (i + 1) % 3) for i in range(20)], many
    assert torch.equal(many[18], torch.tensor([1.0, -1.0]) if RANK == 0 else torch.ones(2)), many[18]
    assert pad_across_processes([]) == []


CHECKS = [check_gather_shapes_and_dtypes, check_gather_nested, check_broadcast, check_reduce,
          check_pad_then_gather_uneven, check_tensors_that_require_grad, check_object_collectives, check_rng,
          check_debug_mode_names_each_rank, check_pad_mismatch_outside_debug_mode,
          check_large_layout_mismatch_outside_debug_mode]

for check in CHECKS:
    check()
    wait_for_everyone()
print(f"CHECK-OPERATIONS-OK rank {RANK}", flush=True)
state.destroy_process_group()  # a clean exit: gloo may abort a process that leaves with the group open
