"""Accelerate's reporting members of ``Accelerator``: handlers, precision, devices, trackers, LOMO."""

from __future__ import annotations

import pytest
import torch

from drivetrain import Accelerator, AutocastKwargs, GradScalerKwargs, InitProcessGroupKwargs, ProfileKwargs
from drivetrain.errors import ConfigError

pytestmark = pytest.mark.usefixtures("fresh_state")


def test_handlers_are_the_ones_given():
    autocast, init, profile = AutocastKwargs(enabled=False), InitProcessGroupKwargs(), ProfileKwargs()
    accelerator = Accelerator(cpu=True, kwargs_handlers=[autocast, init, profile])
    assert accelerator.autocast_handler is autocast and accelerator.init_handler is init
    assert accelerator.profile_handler is profile
    assert accelerator.scaler_handler is None and accelerator.ddp_handler is None


def test_scaler_handler_and_native_amp():
    scaler = GradScalerKwargs(init_scale=1024.0)
    accelerator = Accelerator(cpu=True, mixed_precision="bf16", kwargs_handlers=[scaler])
    assert accelerator.scaler_handler is scaler and accelerator.native_amp is True


def test_plain_run_reports_no_amp_one_device_and_saves():
    accelerator = Accelerator(cpu=True)
    assert accelerator.native_amp is False and accelerator.multi_device is False
    assert accelerator.should_save_model is True and accelerator.log_with == []
    assert accelerator.has_lomo_optimizer is False


def test_log_with_lists_the_selected_trackers(tmp_path):
    from drivetrain.tracking import get_available_trackers

    if "tensorboard" not in get_available_trackers():
        pytest.skip("tensorboard is not installed")
    accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=str(tmp_path))
    assert accelerator.log_with == ["tensorboard"]


def test_lomo_backward_without_a_lomo_optimizer_says_what_it_needs():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    model, _optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ConfigError, match="Lomo"):
        accelerator.lomo_backward(model(torch.ones(1, 2, device=accelerator.device)).sum(), 0.1)


def test_accelerate_s_backend_attributes_are_declared_descriptors_on_their_class():
    """Where ``accelerator.is_fsdp2`` comes from is readable: a descriptor on the class naming
    the plugin that declared it, not a look-up in ``__getattr__``."""
    from drivetrain.runtime.backend_attributes import DeclaredAttribute, declared_attributes
    from drivetrain.state import AcceleratorState, GradientState

    accelerator = Accelerator(cpu=True)
    for owner, name in ((Accelerator, "is_fsdp2"), (Accelerator, "fp8_enabled"), (AcceleratorState, "deepspeed_plugin"),
                        (GradientState, "is_xla_gradients_synced")):
        descriptor = vars(owner)[name]
        assert isinstance(descriptor, DeclaredAttribute) and descriptor.declared_by == "accelerate_compat"
        assert declared_attributes()[f"{owner.__name__}.{name}"] is descriptor
    # a strategy's backend argument reads as an attribute, declared by the strategy's plugin
    assert vars(Accelerator)["fsdp_plugin"].declared_by == "fsdp" and accelerator.fsdp_plugin is None
    assert (accelerator.is_fsdp2, accelerator.fp8_enabled, accelerator.state.is_fsdp2) == (False, False, False)
    # the class's own members are never replaced, and no class answers an undeclared name
    assert isinstance(vars(Accelerator)["parallelism_config"], property)
    for obj in (accelerator, accelerator.state, accelerator.gradient_state):
        assert not hasattr(type(obj), "__getattr__")
        with pytest.raises(AttributeError):
            obj.no_such_backend_attribute


def test_a_backend_attribute_declaration_is_checked_like_any_registration():
    from drivetrain.kernel.registration import identities, item_problem
    from drivetrain.plugin_api import BackendAttribute

    hook = "drivetrain_register_backend_attributes"
    assert item_problem(hook, BackendAttribute(owner="Accelerator", name="is_mine")) is None
    assert "owner must be one of Accelerator" in item_problem(hook, BackendAttribute(owner="Trainer", name="x"))
    assert "a public attribute name" in item_problem(hook, BackendAttribute(owner="Accelerator", name="_private"))
    assert "not a BackendAttribute" in item_problem(hook, "is_mine")
    assert identities(hook, BackendAttribute(owner="GradientState", name="synced")) == ["GradientState.synced"]


def test_the_architecture_doc_lists_every_declared_backend_attribute():
    """docs/architecture.md's table is the one place a reader finds them: it must match what is installed."""
    import re
    from pathlib import Path

    from drivetrain.runtime.backend_attributes import declared_attributes

    Accelerator(cpu=True)
    text = (Path(__file__).parent.parent / "docs" / "architecture.md").read_text()
    documented = dict(re.findall(r"^\| `((?:Accelerator|AcceleratorState|GradientState)\.\w+)` \| (\w+) \|", text, re.M))
    assert documented == {key: d.declared_by for key, d in declared_attributes().items()}


def test_a_third_party_plugin_declares_an_attribute_and_cannot_take_a_built_in_one(monkeypatch):
    import warnings
    from importlib import metadata as importlib_metadata

    from fake_plugins import fake_plugin

    from drivetrain import plugin_manager
    from drivetrain.plugin_api import BackendAttribute, PluginInfo, hookimpl
    from drivetrain.state import AcceleratorState

    @hookimpl
    def drivetrain_register_backend_attributes():
        return [BackendAttribute(owner="Accelerator", name="uses_my_engine", unused=False),
                BackendAttribute(owner="AcceleratorState", name="is_fsdp2", unused="mine")]

    entry = fake_plugin("engine_attributes", PLUGIN_INFO=PluginInfo(api_version="2.0"),
                        drivetrain_register_backend_attributes=drivetrain_register_backend_attributes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager = plugin_manager.PluginManager(env={}, entry_points=[
            *importlib_metadata.entry_points(group="drivetrain.plugins"), entry]).load()
    monkeypatch.setattr(plugin_manager, "_default_manager", manager)
    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(cpu=True)
    assert accelerator.uses_my_engine is False and Accelerator.uses_my_engine.declared_by == "engine_attributes"
    # the built-in declaration keeps its name; the plugin's is refused and said so
    assert accelerator.state.is_fsdp2 is False and AcceleratorState.is_fsdp2.declared_by == "accelerate_compat"
    record = manager.records["engine_attributes"]
    assert record.status == "partial" and "AcceleratorState.is_fsdp2" in record.reason
    # another manager (blocked plugin, a new process's plugins) takes its declarations back
    monkeypatch.setattr(plugin_manager, "_default_manager", None)
    AcceleratorState._reset_state(reset_partial_state=True)
    Accelerator(cpu=True)
    assert not hasattr(Accelerator, "uses_my_engine")
