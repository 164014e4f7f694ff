"""The ipex plugin: Intel Extension for PyTorch optimises model and optimizer at prepare.

Contract tests run everywhere: how the feature is switched on (variable, ``--ipex``,
``ipex_config``), the ``drivetrain_transform_objects`` hook that carries it (with a fake
feature plugin), and the refusal where IPEX is not installed. The tests marked ``ipex`` train
for real through IPEX's CPU path; they need IPEX, which pins its own torch, so they run in
``.venv-ipex`` (``scripts/test-ipex``) and are skipped with the reason elsewhere.
"""

from __future__ import annotations

import argparse
import warnings

import pytest
import torch
from fake_plugins import fake_plugin

from drivetrain import plugin_manager
from drivetrain.errors import ConfigError, PluginSelectionError
from drivetrain.plugin_api import PluginInfo, hookimpl
from importlib import metadata as importlib_metadata
from drivetrain.plugin_manager import PluginManager


def _ipex_usable() -> bool:
    from drivetrain_ipex.plugin import is_ipex_available

    return is_ipex_available()


HAS_IPEX = _ipex_usable()
NO_IPEX_REASON = (f"Intel Extension for PyTorch is not installed for torch {torch.__version__} "
                  "(run scripts/test-ipex, which uses .venv-ipex)")


# ------------------------------------------------------------------ contract


def shrinking_plugin(seen):
    """A feature plugin that halves the first layer's weights of each model it is given,
    together with noting the optimizer of the same call, as an optimising library would."""

    @hookimpl
    def drivetrain_transform_objects(objects, run, accelerator):
        models = [o for o in objects if isinstance(o, torch.nn.Module)]
        optimizers = [o for o in objects if isinstance(o, torch.optim.Optimizer)]
        seen.append((len(models), len(optimizers), type(accelerator).__name__))
        replaced = []
        for obj in objects:
            if isinstance(obj, torch.nn.Linear):
                obj = torch.nn.Sequential(obj)  # a new object in the model's position
            replaced.append(obj)
        return replaced

    return fake_plugin("shrink", PLUGIN_INFO=PluginInfo(api_version="2.0", features=("shrink",)),
                       drivetrain_transform_objects=drivetrain_transform_objects)


@pytest.fixture
def with_shrink(monkeypatch, fresh_state):
    seen: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager = PluginManager(env={}, entry_points=[*importlib_metadata.entry_points(group="drivetrain.plugins"),
                                                      shrinking_plugin(seen)]).load()
    monkeypatch.setattr(plugin_manager, "_default_manager", manager)
    return seen


def test_a_feature_variable_activates_the_plugin_whose_hook_rewrites_prepare(with_shrink, monkeypatch):
    from drivetrain import Accelerator
    from drivetrain.state import AcceleratorState

    accelerator = Accelerator()
    assert isinstance(accelerator.prepare(torch.nn.Linear(2, 2)), torch.nn.Linear)  # not asked for: not active
    assert with_shrink == []
    AcceleratorState._reset_state(reset_partial_state=True)
    monkeypatch.setenv("ACCELERATE_USE_SHRINK", "true")
    accelerator = Accelerator()
    assert "shrink" in accelerator.run.active_plugins
    linear = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(linear.parameters(), lr=0.1)
    model, prepared_optimizer = accelerator.prepare(linear, optimizer)
    assert isinstance(model, torch.nn.Sequential) and model[0] is linear
    assert with_shrink == [(1, 1, "Accelerator")]
    assert prepared_optimizer.optimizer is optimizer


def test_where_ipex_is_missing_asking_for_it_says_how_to_install(fresh_state, monkeypatch):
    if HAS_IPEX:
        pytest.skip("IPEX is installed here")
    from drivetrain import PartialState

    monkeypatch.setenv("ACCELERATE_USE_IPEX", "1")
    with pytest.raises(PluginSelectionError, match=r"plugin 'ipex' cannot be used: .*pip install 'drivetrain\[ipex\]'"):
        PartialState()


def test_launch_option_and_config_key_switch_it_on_in_the_children(tmp_path):
    from drivetrain.cli.launch_cmd import build_parser, merge_config
    from drivetrain_ipex import plugin

    assert build_parser().parse_args(["--ipex", "script.py"]).ipex is True
    assert plugin.drivetrain_launch_environment(argparse.Namespace(ipex=True)) == {"DRIVETRAIN_USE_IPEX": "1"}
    assert plugin.drivetrain_launch_environment(argparse.Namespace(ipex=None)) is None
    config = tmp_path / "config.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nmixed_precision: bf16\n"
                      "use_cpu: true\nipex_config:\n  ipex: true\n")
    parser = build_parser()
    if not HAS_IPEX:  # the key belongs to a plugin that cannot run here: the file says how to fix it
        with pytest.raises(ConfigError, match=r"'ipex_config' belongs to plugin 'ipex'.*drivetrain\[ipex\]"):
            merge_config(parser.parse_args(["--config-file", str(config), "script.py"]), parser)
        config.write_text(config.read_text().replace("ipex: true", "ipex: false"))  # as Accelerate writes it
        assert not merge_config(parser.parse_args(["--config-file", str(config), "script.py"]), parser).ipex
        return
    args = merge_config(parser.parse_args(["--config-file", str(config), "script.py"]), parser)
    assert args.ipex is True


class _PlacementRecorder(torch.nn.Linear):
    """A layer that notes where it is asked to go and stays (no XPU needed to see the request)."""

    def to(self, *args, **kwargs):
        self.moved_to.append(torch.device(args[0] if args else kwargs["device"]))
        return self


def test_an_xpu_model_goes_to_the_device_before_ipex_only_when_placement_is_on(monkeypatch):
    import sys
    import types
    from types import SimpleNamespace

    optimised = []

    def optimize(model, optimizer=None, dtype=None, inplace=False, level="O1", **extra):
        optimised.append(model)
        return model if optimizer is None else (model, optimizer)

    # IPEX's ``optimize`` stands in: what is checked is what the plugin does before calling it
    monkeypatch.setitem(sys.modules, "intel_extension_for_pytorch", types.SimpleNamespace(optimize=optimize))
    monkeypatch.delitem(sys.modules, "drivetrain_ipex.optimize", raising=False)
    from drivetrain_ipex.optimize import MARK
    from drivetrain_ipex.plugin import drivetrain_transform_objects

    xpu = torch.device("xpu", 0)
    run = SimpleNamespace(selection=SimpleNamespace(mixed_precision="no"), state=SimpleNamespace(device=xpu))
    for placement, expected in ((True, [xpu]), (False, [])):
        model = _PlacementRecorder(4, 2)
        model.moved_to = []
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        result = drivetrain_transform_objects([model, optimizer], run, SimpleNamespace(device_placement=placement))
        assert model.moved_to == expected, placement
        assert optimised[-1] is model and getattr(result[0], MARK) and result[1] is optimizer


def test_accelerates_names(fresh_state):
    from drivetrain import AcceleratorState, PartialState
    from drivetrain.utils import is_ipex_available

    assert is_ipex_available() is HAS_IPEX
    PartialState()
    assert AcceleratorState().use_ipex is False  # not switched on


# ------------------------------------------------------------------ real (IPEX's CPU path)


def _train(steps: int, mixed_precision: str, use_ipex: bool, monkeypatch) -> tuple[list[float], torch.nn.Module, object]:
    from drivetrain import Accelerator
    from drivetrain.state import AcceleratorState
    from drivetrain.utils import set_seed

    AcceleratorState._reset_state(reset_partial_state=True)
    if use_ipex:
        monkeypatch.setenv("DRIVETRAIN_USE_IPEX", "1")
    else:
        monkeypatch.delenv("DRIVETRAIN_USE_IPEX", raising=False)
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision)
    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    inputs = torch.randn(256, 16)
    targets = inputs[:, :4].sum(1, keepdim=True) - inputs[:, 4:8].sum(1, keepdim=True)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs, targets), batch_size=32)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    losses = []
    for _epoch in range(steps):
        total = 0.0
        for x, y in data:
            with accelerator.autocast():
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            total += loss.item()
        losses.append(total / len(data))
    return losses, model, accelerator


@pytest.mark.ipex
@pytest.mark.skipif(not HAS_IPEX, reason=NO_IPEX_REASON)
def test_bf16_training_through_ipex_learns_like_the_same_model_without_it(fresh_state, monkeypatch):
    plain, plain_model, _ = _train(15, "bf16", use_ipex=False, monkeypatch=monkeypatch)
    with_ipex, model, accelerator = _train(15, "bf16", use_ipex=True, monkeypatch=monkeypatch)
    assert accelerator.state.use_ipex is True
    assert "ipex" in accelerator.run.active_plugins
    # IPEX changed the model: bf16 weights (fp32 master copies in the optimizer), its own step
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in plain_model.parameters()} == {torch.float32}
    assert "master" in getattr(accelerator._optimizers[0].optimizer.step, "__qualname__", "")
    assert with_ipex[-1] < with_ipex[0] / 4 and plain[-1] < plain[0] / 4
    assert abs(with_ipex[-1] - plain[-1]) < 0.25 * plain[0]
    # the state dict IPEX gives is fp32 (its master weights), as a checkpoint needs
    assert {v.dtype for v in accelerator.unwrap_model(model).state_dict().values()} == {torch.float32}


@pytest.mark.ipex
@pytest.mark.skipif(not HAS_IPEX, reason=NO_IPEX_REASON)
def test_fp32_training_through_ipex(fresh_state, monkeypatch):
    losses, model, accelerator = _train(10, "no", use_ipex=True, monkeypatch=monkeypatch)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert losses[-1] < losses[0] / 4


@pytest.mark.ipex
@pytest.mark.skipif(not HAS_IPEX, reason=NO_IPEX_REASON)
def test_ipex_on_a_platform_it_does_not_optimise_is_refused(fresh_state, monkeypatch):
    from drivetrain import Accelerator
    from drivetrain.errors import IncompatibleChoiceError

    monkeypatch.setenv("DRIVETRAIN_USE_IPEX", "1")
    from drivetrain_ipex import plugin

    run = argparse.Namespace(selection=argparse.Namespace(platform=argparse.Namespace(name="cuda")))
    with pytest.raises(IncompatibleChoiceError, match="IPEX optimises CPU and XPU runs, not platform 'cuda'"):
        plugin.drivetrain_configure_run(run, None)
    assert Accelerator(cpu=True).state.use_ipex is True


@pytest.mark.ipex
@pytest.mark.multiprocess
@pytest.mark.skipif(not HAS_IPEX, reason=NO_IPEX_REASON)
def test_ipex_composes_with_ddp_on_two_processes_and_checkpoints(tmp_path):
    from launching import assert_ok, launch

    result = launch("check_ipex_ddp.py", str(tmp_path / "ckpt"), launch_args=("--ipex", "--mixed-precision", "bf16"))
    assert_ok(result)
    first, last = map(float, result.stdout.split("IPEX-DDP OK")[1].split())
    assert last < first / 4
