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
