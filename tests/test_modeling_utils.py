"""Helpers of the big-model service at Accelerate's paths (``utils.modeling``, ``utils.memory``)."""

from __future__ import annotations

import gc
from unittest import mock

from torch import nn

from drivetrain.utils.memory import clear_device_cache
from drivetrain.utils.modeling import compute_module_sizes, find_tied_parameters, get_module_size_with_ties


def test_module_size_with_ties_counts_each_partner_without_the_shared_tensor():
    # Twelve linears share one weight: "1" must not claim "10.weight" or "11.weight".
    model = nn.ModuleList([nn.Linear(4, 4) for _ in range(12)])
    for i in range(1, 12):
        model[i].weight = model[0].weight
    sizes = compute_module_sizes(model)
    # find_tied_parameters gives one group; the first name is the module being placed.
    group = find_tied_parameters(model)[0]
    here = group[0].rsplit(".", 1)[0]
    pending = [(n, m) for n, m in model.named_children() if n != here]

    total, names, modules = get_module_size_with_ties(group[1:], sizes[here], sizes, pending)

    bias = sizes["0.bias"]
    assert total == sizes[here] + 11 * bias
    assert sorted(names) == sorted(n for n, _ in pending)
    assert [dict(pending)[n] for n in names] == modules


def test_module_size_with_ties_ignores_parameters_of_modules_already_placed():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    sizes = compute_module_sizes(model)
    assert get_module_size_with_ties(["1.weight"], 10, sizes, []) == (10, [], [])


def test_clear_device_cache_empties_the_platform_cache_and_collects_when_asked(monkeypatch):
    from drivetrain.services.big_model import modeling

    platform = mock.Mock()
    monkeypatch.setattr(modeling, "current_platform", lambda: platform)
    with mock.patch.object(gc, "collect") as collect:
        clear_device_cache()
        collect.assert_not_called()
        clear_device_cache(garbage_collection=True)
        collect.assert_called_once()
    assert platform.empty_cache.call_count == 2


def test_a_negative_size_is_refused():
    import pytest

    from drivetrain.errors import ConfigError
    from drivetrain.utils.modeling import convert_file_size_to_int

    for size in ("-1GB", -3):
        with pytest.raises(ConfigError, match="negative"):
            convert_file_size_to_int(size)
    assert convert_file_size_to_int("0MB") == 0


def test_a_value_of_another_shape_is_refused_before_it_replaces_the_tensor():
    import pytest
    import torch

    from drivetrain.utils.modeling import set_module_tensor_to_device

    layer = nn.Linear(3, 4)
    before = layer.weight.detach().clone()
    with pytest.raises(ValueError, match=r"torch.Size\(\[2, 2\]\) in \"weight\" .*torch.Size\(\[4, 3\]\)"):
        set_module_tensor_to_device(layer, "weight", "cpu", value=torch.zeros(2, 2))
    assert torch.equal(layer.weight, before)


def test_non_persistent_buffer_names_of_submodules_come_as_a_new_set():
    import torch

    from drivetrain.utils.modeling import get_non_persistent_buffers

    model = nn.Sequential(nn.Linear(2, 2))
    model[0].register_buffer("scratch", torch.zeros(1), persistent=False)
    assert get_non_persistent_buffers(model) == set()
    names = get_non_persistent_buffers(model, recurse=True)
    assert names == {"scratch"}
    names.add("other")
    assert model[0]._non_persistent_buffers_set == {"scratch"}
    assert model._non_persistent_buffers_set == set()


def test_clean_device_map_merges_a_whole_model_on_one_device_into_the_root():
    from drivetrain.utils.modeling import clean_device_map

    assert clean_device_map({"a": "cpu", "b.x": "cpu", "b.y": "cpu"}) == {"": "cpu"}
    assert clean_device_map({"a.x": "cpu", "a.y": "cpu", "b": "disk"}) == {"a": "cpu", "b": "disk"}


def test_a_platform_device_left_empty_is_said_in_the_log(caplog, monkeypatch):
    from collections import OrderedDict

    from drivetrain.utils.modeling import infer_auto_device_map

    model = nn.Sequential(OrderedDict([("a", nn.Linear(10, 4)), ("b", nn.Linear(4, 4)), ("c", nn.Linear(4, 8))]))
    with caplog.at_level("WARNING"):
        placed = infer_auto_device_map(model, max_memory={0: 256})
    assert 0 not in placed.values()
    assert any("device 0 was given no module" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING"):
        placed = infer_auto_device_map(model, max_memory={0: 256}, fallback_allocation=True)
    assert 0 in placed.values()
    assert not any("was given no module" in r.getMessage() for r in caplog.records)
