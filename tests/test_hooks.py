"""drivetrain.hooks: hooks around forward, device alignment and offload, layerwise casting."""

from __future__ import annotations

import torch
from torch import nn

from drivetrain.big_modeling import attach_layerwise_casting_hooks
from drivetrain.hooks import (
    AlignDevicesHook,
    ModelHook,
    SequentialHook,
    add_hook_to_module,
    attach_align_device_hook,
    remove_hook_from_module,
    remove_hook_from_submodules,
)


class AddOne(ModelHook):
    def pre_forward(self, module, *args, **kwargs):
        return (args[0] + 1,), kwargs


class Double(ModelHook):
    def post_forward(self, module, output):
        return output * 2


def test_hooks_wrap_forward_in_order_and_come_off():
    layer = nn.Linear(3, 3)
    x = torch.randn(2, 3)
    plain = layer(x)
    add_hook_to_module(layer, AddOne())
    assert torch.equal(layer(x), layer._old_forward(x + 1))
    add_hook_to_module(layer, Double(), append=True)
    assert isinstance(layer._hf_hook, SequentialHook)
    assert torch.equal(layer(x), 2 * layer._old_forward(x + 1))
    add_hook_to_module(layer, Double())  # replaces, does not stack
    assert torch.equal(layer(x), 2 * plain)
    remove_hook_from_module(layer)
    assert "forward" not in layer.__dict__ and not hasattr(layer, "_hf_hook")
    assert torch.equal(layer(x), plain)


def test_no_grad_hook():
    class NoGrad(ModelHook):
        no_grad = True

    layer = nn.Linear(3, 3)
    add_hook_to_module(layer, NoGrad())
    assert not layer(torch.randn(1, 3)).requires_grad


def test_offload_hook_loads_weights_for_forward_only():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.randn(3, 4)
    expected = model(x)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    attach_align_device_hook(model, execution_device="cpu", offload=True, weights_map=weights)
    assert model[0].weight.device.type == "meta"
    assert torch.equal(model(x), expected)
    assert model[2].weight.device.type == "meta"  # released again after forward
    remove_hook_from_submodules(model)
    assert model[0].weight.device.type == "cpu" and torch.equal(model(x), expected)


def test_align_hook_keeps_outputs_with_inputs():
    layer = nn.Linear(2, 2)
    add_hook_to_module(layer, AlignDevicesHook(execution_device="cpu", io_same_device=True))
    out = layer(torch.ones(1, 2))
    assert out.device.type == "cpu"


def test_layerwise_casting_stores_low_and_computes_high():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 4))
    x = torch.randn(2, 8)
    attach_layerwise_casting_hooks(model, storage_dtype=torch.bfloat16, compute_dtype=torch.float32)
    assert model[0].weight.dtype == torch.bfloat16 and model[1].weight.dtype == torch.float32
    out = model(x)  # bf16 weights against fp32 inputs would fail: computed in fp32
    assert out.dtype == torch.float32
    assert model[2].weight.dtype == torch.bfloat16


class _Scaled(nn.Module):
    # a parameter held directly, not by a layer: its precision is not a layer's weight to cast
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * self.scale


def test_layerwise_casting_casts_only_convolutions_and_linear_layers():
    model = nn.Sequential(_Scaled(), nn.Conv1d(1, 1, 1))
    attach_layerwise_casting_hooks(model, storage_dtype=torch.float16, compute_dtype=torch.float32)
    assert model[0].scale.dtype == torch.float32
    assert model[0].proj.weight.dtype == torch.float16 and model[1].weight.dtype == torch.float16
    assert not hasattr(model[0], "_hf_hook")
    assert model[0](torch.ones(2, 4)).dtype == torch.float32


def test_layerwise_casting_skips_by_dotted_name_and_by_class():
    model = nn.ModuleList([_Scaled(), nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4))])
    attach_layerwise_casting_hooks(model, storage_dtype=torch.float16, compute_dtype=torch.float32,
                                   skip_modules_pattern=r"^0\.proj$", skip_modules_classes=(nn.Sequential,))
    assert model[0].proj.weight.dtype == torch.float32  # by name
    assert model[2][0].weight.dtype == torch.float32  # inside a skipped class
    assert model[1].weight.dtype == torch.float16
