"""drivetrain.utils operations in one process: nested structures, conversions, seeding.

The same operations across two real processes are checked by
tests/scripts/check_operations.py (tests/test_operations_multiprocess.py).
"""

from __future__ import annotations

import collections
import random
from collections import OrderedDict

import numpy
import pytest
import torch

from drivetrain import utils
from drivetrain.errors import ConfigError, DistributedError, UnsupportedDataError
from drivetrain.state import GradientState, PartialState
from drivetrain.utils import (
    DistributedOperationException,
    TensorInformation,
    broadcast,
    broadcast_object_list,
    concatenate,
    convert_outputs_to_fp32,
    convert_to_fp32,
    find_batch_size,
    find_device,
    gather,
    gather_for_metrics,
    gather_object,
    get_data_structure,
    honor_type,
    ignorant_find_batch_size,
    initialize_tensors,
    is_namedtuple,
    is_tensor_information,
    is_torch_tensor,
    listify,
    pad_across_processes,
    pad_input_tensors,
    recursively_apply,
    reduce,
    send_to_device,
    set_seed,
    slice_tensors,
    synchronize_rng_state,
    synchronize_rng_states,
)

pytestmark = pytest.mark.usefixtures("fresh_state")
Point = collections.namedtuple("Point", ["x", "y"])


def nested():
    return {"a": torch.arange(4), "b": [torch.ones(4, 2), (torch.zeros(4),)], "c": Point(torch.ones(4), torch.ones(4, 3)),
            "meta": "kept"}


def test_recursively_apply_keeps_every_container_type():
    data = nested()
    doubled = recursively_apply(lambda t: t * 2, data)
    assert isinstance(doubled["b"], list) and isinstance(doubled["b"][1], tuple) and isinstance(doubled["c"], Point)
    assert torch.equal(doubled["a"], torch.arange(4) * 2) and doubled["meta"] == "kept"
    ordered = recursively_apply(lambda t: t + 1, OrderedDict(z=torch.zeros(1), a=torch.zeros(1)))
    assert isinstance(ordered, OrderedDict) and list(ordered) == ["z", "a"]
    defaults = recursively_apply(lambda t: t, collections.defaultdict(list, x=torch.zeros(1)))
    assert torch.equal(defaults["x"], torch.zeros(1))
    with pytest.raises(TypeError, match="Unsupported types \\(<class .str.>\\)"):
        recursively_apply(lambda t: t, data, error_on_other_type=True)


def test_honor_type_and_namedtuple():
    assert honor_type(Point(1, 2), iter([3, 4])) == Point(3, 4)
    assert honor_type((1, 2), (x for x in [5])) == (5,)
    assert is_namedtuple(Point(1, 2)) and not is_namedtuple((1, 2))


def test_send_to_device_skip_keys_and_objects_with_to():
    class Moves:
        def __init__(self):
            self.device = None

        def to(self, device):  # no non_blocking argument
            self.device = device
            return self

    data = {"x": torch.ones(2), "y": torch.ones(2), "o": Moves(), "n": 3}
    out = send_to_device(data, "cpu", non_blocking=True, skip_keys="y")
    assert out["y"] is data["y"] and str(out["o"].device) == "cpu" and out["n"] == 3
    assert send_to_device(data["x"], "cpu") is data["x"]  # already there: no copy
    assert isinstance(send_to_device(Point(torch.ones(1), [torch.ones(1)]), torch.device("cpu")), Point)
    meta = send_to_device({"x": torch.ones(2)}, "meta")
    assert meta["x"].device.type == "meta"


def test_structure_helpers():
    data = nested()
    structure = get_data_structure(data)
    assert structure["a"] == TensorInformation(torch.Size([4]), torch.int64)
    assert is_tensor_information(structure["a"]) and not is_tensor_information(data["a"])
    empty = initialize_tensors(structure)
    assert empty["b"][0].shape == (4, 2) and empty["c"].y.dtype == torch.float32
    assert utils.get_shape(data)["c"].y == [4, 3]
    assert find_batch_size(data) == 4 and find_batch_size([(torch.ones(7, 2),)]) == 7
    with pytest.raises(ValueError):
        find_batch_size([])
    with pytest.raises(TypeError):
        find_batch_size(["text"])
    assert ignorant_find_batch_size("text") is None
    assert find_device(data) == torch.device("cpu") and find_device({"k": [1, "x"]}) is None
    assert find_device(1, [torch.ones(1, device="meta")]).type == "meta"
    assert is_torch_tensor(torch.ones(1)) and not is_torch_tensor([1])
    assert listify({"a": torch.tensor([1, 2]), "b": torch.tensor(1.5, dtype=torch.bfloat16)}) == {"a": [1, 2], "b": 1.5}


def test_slice_and_concatenate():
    data = nested()
    first = slice_tensors(data, slice(0, 2))
    assert first["b"][0].shape == (2, 2) and first["c"].y.shape == (2, 3) and first["meta"] == "kept"
    second = slice_tensors(data, slice(2, None))
    joined = concatenate([{k: v for k, v in first.items() if k != "meta"}, {k: v for k, v in second.items() if k != "meta"}])
    assert torch.equal(joined["a"], data["a"]) and isinstance(joined["c"], Point)
    assert concatenate([torch.ones(2, 1), torch.zeros(2, 1)], dim=1).shape == (2, 2)
    with pytest.raises(TypeError):
        concatenate([["a"], ["b"]])
    # one batch is returned as it is, whatever it holds
    only = {"ids": ["x", "y"], "n": 2}
    assert concatenate([only]) is only


def test_error_on_other_type_names_the_function_and_the_test():
    def is_a_tensor(value):
        return isinstance(value, torch.Tensor)

    def double(tensor):
        return tensor * 2

    with pytest.raises(TypeError, match=r"Unsupported types \(<class 'str'>\) passed to `double`.*`is_a_tensor`"):
        recursively_apply(double, [torch.ones(1), "x"], test_type=is_a_tensor, error_on_other_type=True)


def test_pad_across_processes_warns_on_a_nested_tensor_and_returns_it():
    nested_tensor = torch.nested.nested_tensor([torch.ones(3), torch.ones(1)])
    with pytest.warns(utils.CannotPadNestedTensorWarning):
        assert pad_across_processes({"n": nested_tensor})["n"] is nested_tensor


def test_fp32_conversions():
    data = {"h": torch.ones(2, dtype=torch.float16), "b": torch.ones(2, dtype=torch.bfloat16), "i": torch.ones(2, dtype=torch.int64),
            "s": "x"}
    out = convert_to_fp32(data)
    assert out["h"].dtype == out["b"].dtype == torch.float32 and out["i"].dtype == torch.int64 and out["s"] == "x"

    def forward(x):
        return {"logits": x.to(torch.bfloat16)}

    wrapped = convert_outputs_to_fp32(forward)
    assert wrapped(torch.ones(1))["logits"].dtype == torch.float32 and wrapped.__name__ == "forward"
    assert convert_outputs_to_fp32(torch.ones(1, dtype=torch.float16)).dtype == torch.float32


def test_collectives_on_one_process_return_their_input():
    data = nested()
    assert gather(data) is data
    assert broadcast(data) is data
    assert pad_across_processes(data) is data
    assert gather_object(["x"]) == ["x"] and gather_object({"k": 1}) == [{"k": 1}]
    assert broadcast_object_list([1, "a"]) == [1, "a"]
    tensor = torch.tensor([1.0, 2.0])
    mean = reduce(tensor)
    assert torch.equal(mean, tensor) and mean is not tensor
    assert torch.equal(reduce({"x": tensor}, "sum", scale=2.0)["x"], tensor * 2)
    with pytest.raises(ValueError, match="reduction"):
        reduce(tensor, "median")
    # refused on one process as on two: a script that works on one must not fail on two
    with pytest.raises(UnsupportedDataError, match="gather works on nested lists, tuples and dicts of tensors; it "
                                                   "got a str"):
        gather("a string")
    assert pad_input_tensors(torch.ones(5, 2), batch_size=5, num_processes=2).shape == (6, 2)


def test_gather_for_metrics_cuts_the_remainder_at_the_end_of_a_loader():
    class FakeLoader:
        end_of_dataloader = True
        remainder = 3

    state = GradientState()
    data = torch.arange(8)
    assert torch.equal(gather_for_metrics(data), data)  # no active loader
    loader = FakeLoader()
    state._add_dataloader(loader)
    try:
        assert torch.equal(gather_for_metrics({"x": data})["x"], torch.arange(3))
        assert gather_for_metrics(["a", "b", "c", "d"]) == ["a", "b", "c"]  # not tensors: gather_object
        loader.remainder = -1
        assert torch.equal(gather_for_metrics(data), data)
        loader.end_of_dataloader = False
        loader.remainder = 3
        assert torch.equal(gather_for_metrics(data), data)
    finally:
        state._remove_dataloader(loader)


def test_set_seed_seeds_every_library():
    set_seed(42)
    first = (random.random(), numpy.random.rand(), torch.rand(1).item())
    set_seed(42)
    assert (random.random(), numpy.random.rand(), torch.rand(1).item()) == first
    set_seed(42, device_specific=True)  # one process: index 0
    assert torch.rand(1).item() == first[2]
    set_seed(2**40)  # larger than NumPy accepts: folded
    try:
        set_seed(1, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_synchronize_rng_states_on_one_process():
    state = torch.get_rng_state()
    synchronize_rng_states(["torch", PartialState().platform.name])
    assert torch.equal(state, torch.get_rng_state())
    generator = torch.Generator().manual_seed(3)
    synchronize_rng_state("generator", generator=generator)
    with pytest.raises(ConfigError, match="generator="):
        synchronize_rng_state("generator")
    with pytest.raises(ConfigError, match="unknown random generator"):
        synchronize_rng_state("dice")


def test_public_names_resolve():
    import drivetrain

    for name in ("set_seed", "synchronize_rng_states", "gather", "reduce",
                 "broadcast", "pad_across_processes", "gather_object", "broadcast_object_list", "send_to_device"):
        assert callable(getattr(drivetrain, name)), name
    for name in utils.__all__:
        assert hasattr(utils, name), name


class _FailingCollectives:
    """Two processes whose backend fails every collective, as gloo does when their shapes differ."""

    world_size, rank = 2, 0

    def _fail(self, *args, **kwargs):
        raise DistributedError("gloo all_gather_into: Read error [127.0.0.1]:9096: Connection reset by peer.")

    all_gather_into = all_reduce = broadcast = _fail


@pytest.mark.parametrize("operation", ["gather", "reduce", "broadcast", "gather_for_metrics"])
def test_a_backend_failure_in_a_collective_is_one_line_pointing_to_debug_mode(operation):
    PartialState().run._collectives = _FailingCollectives()
    name = "gather" if operation == "gather_for_metrics" else operation
    with pytest.raises(DistributedOperationException) as caught:
        getattr(utils, operation)(torch.ones(3))
    message = str(caught.value)
    assert "\n" not in message and message.startswith("in gather_for_metrics(): " * (name != operation) + f"{name}()")
    assert f"the ranks passed tensors of different shapes/dtypes to {name}()" in message
    assert "Connection reset by peer" in message and "run with --debug (ACCELERATE_DEBUG_MODE=1) to find which" in message


def test_the_torch_collectives_turn_a_backend_runtime_error_into_one_line(monkeypatch):
    from drivetrain_torch_distributed import process_group

    def read_error(*args, **kwargs):
        raise RuntimeError("[/src/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:9096: "
                           "Connection reset by peer. This is typically caused by a remote worker hanging.\nmore")

    monkeypatch.setattr(process_group, "_all_gather_single", read_error)
    monkeypatch.setattr(process_group.dist, "all_reduce", read_error)
    collectives = object.__new__(process_group.TorchCollectives)
    collectives.world_size, collectives.rank, collectives.backend = 2, 0, "gloo"
    collectives._missing = process_group._GLOO_MISSING  # int16 goes through a wider all_reduce: wrapped once
    for call, name in ((lambda: collectives.all_gather_into(torch.ones(2)), "all_gather_into"),
                       (lambda: collectives.all_reduce(torch.ones(2, dtype=torch.int16), "sum"), "all_reduce")):
        with pytest.raises(DistributedError) as caught:
            call()
        assert str(caught.value) == f"gloo {name}: Read error [127.0.0.1]:9096: Connection reset by peer."


def test_the_torch_collectives_take_tensors_that_require_grad():
    """gloo writes a gather into views of its result, which autograd refuses for a parameter's
    data unless the collective detaches it; a broadcast lands in a parameter's (view's) memory."""
    import torch.distributed as dist
    from drivetrain_torch_distributed.process_group import TorchCollectives

    existed = dist.is_initialized()
    if not existed:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        collectives = TorchCollectives()
        weight = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
        gathered = collectives.all_gather_into(weight)
        assert torch.equal(gathered, weight.detach()) and not gathered.requires_grad
        scalar = collectives.all_gather_into(torch.nn.Parameter(torch.tensor(2.0)))
        assert scalar.shape == (1,) and not scalar.requires_grad
        assert [t.tolist() for t in collectives.all_gather(weight * 2)] == [(weight * 2).tolist()]
        column = weight.t()[1]  # a non-contiguous view of a parameter
        assert collectives.broadcast(column) is column and weight.requires_grad
        assert collectives.broadcast(weight) is weight
    finally:
        if not existed:
            dist.destroy_process_group()
