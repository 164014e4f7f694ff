"""Device maps: planning (``infer_auto_device_map``, ``check_device_map``) and the checks made
where a map is applied (``dispatch_model``, ``load_checkpoint_in_model``)."""

from __future__ import annotations

import warnings
from collections import OrderedDict

import pytest
import torch
from torch import nn

from drivetrain import dispatch_model
from drivetrain.errors import ConfigError
from drivetrain.utils.modeling import (check_device_map, compute_module_sizes, get_balanced_memory,
                                      infer_auto_device_map, load_checkpoint_in_model)

# An index no machine running these tests has: planning accepts it, applying refuses it.
ABSENT = 1000


class Block(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.norm = nn.LayerNorm(2 * width)
        self.down = nn.Linear(2 * width, width)


def _blocks(count: int, width: int = 8) -> nn.Sequential:
    return nn.Sequential(OrderedDict((f"b{i}", Block(width)) for i in range(count)))


def _no_warnings(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    assert [str(w.message) for w in caught] == []
    return result


def test_a_map_for_devices_this_machine_lacks_is_planned_and_refused_only_when_applied():
    model = _blocks(2)
    sizes = compute_module_sizes(model)
    plan = infer_auto_device_map(model, max_memory={ABSENT: sizes[""] * 2}, no_split_module_classes=["Block"])
    assert plan == {"": ABSENT}
    check_device_map(model, plan)  # planning: covers the model, devices not looked up
    with pytest.raises(ConfigError, match=rf"entry ''\) names device {ABSENT}, which does not exist"):
        dispatch_model(model, plan)
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_keys_naming_nothing_are_warned_when_planned_and_refused_when_applied(tmp_path):
    model = _blocks(2)
    device_map = {"b0": "cpu", "b1": "cpu", "b2": "cpu", "head": "cpu"}
    with pytest.warns(UserWarning, match=r"device_map keys do not match any submodules.*'b2', 'head'"):
        check_device_map(model, device_map)  # planning, as Accelerate's: a map may serve variants of a model
    source = _blocks(2)
    torch.save(source.state_dict(), tmp_path / "pytorch_model.bin")
    before = [p.detach().clone() for p in model.parameters()]
    refusal = r"device_map names 'b2', which \w+ has no module, parameter or buffer of \(and 1 more"
    with pytest.raises(ConfigError, match=refusal):
        load_checkpoint_in_model(model, tmp_path / "pytorch_model.bin", device_map=device_map)
    with pytest.raises(ConfigError, match=refusal):
        dispatch_model(model, device_map)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing loaded or moved
    assert not hasattr(model, "hf_device_map")
    with pytest.raises(ConfigError, match=r"names 'b1x'.*did you mean 'b1'\?") as refused:
        dispatch_model(model, {"b0": "cpu", "b1x": "cpu"})
    assert "\n" not in str(refused.value)
    load_checkpoint_in_model(model, tmp_path / "pytorch_model.bin", device_map={"b0": "cpu", "b1": "cpu"})
    assert torch.equal(model.b1.down.weight, source.b1.down.weight)
    # A misspelt key that leaves weights without a device is still an error, naming them.
    with pytest.warns(UserWarning, match="'b1x'"), pytest.raises(ConfigError, match=r"does not place b1\.up\.weight"):
        check_device_map(model, {"b0": "cpu", "b1x": "cpu"})


def test_the_module_being_placed_is_not_reserved_for_so_a_whole_model_can_fit():
    # Room is kept on the main device for the largest layer still to place (offloaded layers
    # run there); the one being placed is not among them. "big" is the largest layer: were it
    # in its own reserve, it could not go to device 0 with this budget.
    model = nn.Sequential(OrderedDict([("big", nn.Linear(16, 16)), ("s1", nn.Linear(4, 4)), ("s2", nn.Linear(4, 4))]))
    sizes = compute_module_sizes(model)
    budget = sizes[""] + sizes["s1"]  # the model and room for one small layer
    assert budget - sizes["big"] < sizes["big"]
    assert infer_auto_device_map(model, max_memory={0: budget}) == {"": 0}


def test_a_tied_partner_is_split_so_the_tied_layers_share_a_device():
    model = _blocks(3)
    model.b2.down.weight = model.b0.down.weight
    sizes = compute_module_sizes(model)
    assert sizes.get("b2.down.weight", 0) == 0  # counted once, under b0
    # Device 0 holds b0 and the reserve, but not b0 with all of b2: b2 is split, and only
    # its tied layer joins b0.
    reserve = max(sizes[f"b1.{n}"] for n in ("up", "norm", "down"))
    room = sizes["b0"] + sizes["b2.down"] + reserve
    assert sizes["b0"] + sizes["b2"] + reserve > room
    plan = infer_auto_device_map(model, max_memory={0: room, 1: sizes[""]})
    assert plan == {"b0": 0, "b2.down": 0, "b1": 1, "b2.up": 1, "b2.norm": 1}
    assert {plan["b0"], plan["b2.down"]} == {0}


def test_offloaded_buffers_do_not_change_the_map_and_a_warning_says_when_no_device_has_room():
    model = _blocks(3)
    for block in model:
        block.register_buffer("table", torch.zeros(64))
    sizes = compute_module_sizes(model)
    table = 64 * 4
    reserve = max(sizes["b1"], sizes["b2"])  # Block is not split: the reserve is a whole block
    # Device 0 takes b0 only; b1 and b2 go to the CPU and their tables stay on a device.
    tight = {0: sizes["b0"] + reserve, "cpu": 10 * sizes[""]}
    with pytest.warns(UserWarning, match=rf"buffers \({2 * table} bytes\).*offload_buffers=True"):
        plan = infer_auto_device_map(model, max_memory=tight, no_split_module_classes=["Block"])
    assert plan == {"b0": 0, "b1": "cpu", "b2": "cpu"}
    assert _no_warnings(lambda: infer_auto_device_map(model, max_memory=tight, no_split_module_classes=["Block"],
                                                      offload_buffers=True)) == plan
    # A second device with room left for the tables: nothing to say.
    roomy = {0: sizes["b0"] + reserve, 1: sizes["b1"] + 2 * table, "cpu": 10 * sizes[""]}
    plan = _no_warnings(lambda: infer_auto_device_map(model, max_memory=roomy, no_split_module_classes=["Block"]))
    assert plan == {"b0": 0, "b1": 1, "b2": "cpu"}


def test_fallback_places_a_later_layer_found_inside_a_module_and_keeps_ties_together():
    model = nn.Sequential(OrderedDict([("big", nn.Linear(32, 32)),
                                       ("inner", nn.Sequential(OrderedDict([("a", nn.Linear(16, 16)),
                                                                            ("b", nn.Linear(2, 2))])))]))
    sizes = compute_module_sizes(model)
    room = sizes["big"] + sizes["inner.b"]  # the reserve is big's size: only inner.b fits beside it
    assert sizes["inner.a"] + sizes["big"] > room
    assert 0 not in infer_auto_device_map(model, max_memory={0: room}).values()
    plan = infer_auto_device_map(model, max_memory={0: room}, fallback_allocation=True)
    assert plan == {"big": "disk", "inner.a": "disk", "inner.b": 0}

    tied = nn.Sequential(OrderedDict([("x", nn.Linear(8, 8)), ("y", nn.Linear(8, 8))]))
    tied.y.weight = tied.x.weight
    sizes = compute_module_sizes(tied)
    assert infer_auto_device_map(tied, max_memory={0: sizes[""] + sizes["y"]}, fallback_allocation=True) == {"": 0}


def test_only_devices_passed_over_empty_are_reported(caplog):
    model = _blocks(2)
    sizes = compute_module_sizes(model)
    with caplog.at_level("WARNING"):
        plan = infer_auto_device_map(model, max_memory={0: 10 * sizes[""], 1: 10 * sizes[""]})
    assert plan == {"": 0}
    assert not any("was given no module" in r.getMessage() for r in caplog.records)
    with caplog.at_level("WARNING"):
        plan = infer_auto_device_map(model, max_memory={0: 1, 1: 10 * sizes[""]})
    assert plan == {"": 1}
    assert [r.getMessage().split(":")[0] for r in caplog.records if "was given no module" in r.getMessage()] == \
        ["device 0 was given no module"]


def test_planning_helpers_take_string_sizes_and_convert_the_callers_mapping():
    # PEFT and diffusers pass max_memory as users write it, then read it back
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 64))
    for plan in (infer_auto_device_map, get_balanced_memory):
        asked = {"cpu": "20KB", "disk": "1GB"}
        plan(model, max_memory=asked)
        assert asked == {"cpu": 20_000, "disk": 10**9}, plan.__name__
    device_map = infer_auto_device_map(model, max_memory={"cpu": "40KB", "disk": "1GB"})
    assert set(device_map.values()) == {"cpu", "disk"}
