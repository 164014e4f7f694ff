"""Accelerate's constructor order, defaults and state members, as a script written for it uses them."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

from drivetrain.errors import ConfigError

pytestmark = pytest.mark.usefixtures("fresh_state")

#: Accelerate 1.15's ``Accelerator.__init__`` parameters, in order.
ACCELERATE_ORDER = (
    "device_placement", "split_batches", "mixed_precision", "gradient_accumulation_steps", "cpu",
    "dataloader_config", "deepspeed_plugin", "fsdp_plugin", "torch_tp_plugin", "megatron_lm_plugin", "rng_types",
    "log_with", "project_dir", "project_config", "gradient_accumulation_plugin", "step_scheduler_with_optimizer",
    "kwargs_handlers", "dynamo_backend", "dynamo_plugin", "deepspeed_plugins", "parallelism_config",
)


def _positional(**given):
    """The positional argument list Accelerate's signature gives for these keywords."""
    from drivetrain import Accelerator

    defaults = {name: p.default for name, p in inspect.signature(Accelerator).parameters.items()
                if p.kind is p.POSITIONAL_OR_KEYWORD}
    values = list(defaults.values())
    for name, value in given.items():
        values[ACCELERATE_ORDER.index(name)] = value
    return values


def test_every_general_parameter_sits_where_accelerate_puts_it():
    from drivetrain import Accelerator

    names = [name for name, p in inspect.signature(Accelerator).parameters.items()
             if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert tuple(names) == ACCELERATE_ORDER


def test_accelerator_state_s_parameters_are_accelerate_s():
    from drivetrain.state import AcceleratorState

    names = [name for name, p in inspect.signature(AcceleratorState).parameters.items()
             if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert names == ["mixed_precision", "cpu", "dynamo_plugin", "deepspeed_plugin", "fsdp_plugin", "torch_tp_plugin",
                     "megatron_lm_plugin", "parallelism_config", "_from_accelerator"]


def test_a_positional_call_lands_on_accelerate_s_parameters(tmp_path):
    from drivetrain import Accelerator

    accelerator = Accelerator(True, False, "no", 3, True, None, None, None, None, None, ["torch"], None,
                              str(tmp_path), None, None, False)
    assert accelerator.gradient_accumulation_steps == 3 and accelerator.rng_types == ["torch"]
    assert accelerator.project_dir == str(tmp_path) and accelerator.step_scheduler_with_optimizer is False
    assert accelerator.device.type == "cpu" and accelerator.fsdp_plugin is None


@pytest.mark.usefixtures("private_group")
def test_a_backend_plugin_given_by_position_selects_its_strategy():
    from drivetrain import Accelerator, FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    accelerator = Accelerator(*_positional(fsdp_plugin=plugin, gradient_accumulation_steps=2))
    assert accelerator.distributed_type == "FSDP" and accelerator.state.fsdp_plugin is plugin
    assert accelerator.is_fsdp2 and accelerator.state.is_fsdp2 and accelerator.gradient_accumulation_steps == 2
    # the other strategies' attributes read as Accelerate's do while they are unused
    assert accelerator.state.deepspeed_plugins is None and accelerator.deepspeed_plugin is None
    assert accelerator.state.parallelism_config is None and accelerator.torch_device_mesh is None
    assert accelerator.gradient_state.is_xla_gradients_synced is True  # FSDP synchronises gradients itself


def test_a_backend_argument_by_position_and_by_keyword_is_refused():
    from drivetrain import Accelerator

    marker = object()
    with pytest.raises(TypeError, match="multiple values for argument 'fsdp_plugin'"):
        Accelerator(*_positional(fsdp_plugin=marker), fsdp_plugin=marker)


def test_a_backend_argument_no_installed_strategy_takes_is_a_clear_error():
    env = {**os.environ, "DRIVETRAIN_BLOCK_PLUGINS": "deepspeed"}
    code = ("from drivetrain import Accelerator\n"
            "try:\n    Accelerator(True, False, None, 1, True, None, {'zero_optimization': {}})\n"
            "except TypeError as error:\n    print(error)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "unexpected keyword argument(s) ['deepspeed_plugin']" in out.stdout, out.stderr


def test_without_the_compat_plugin_positions_and_keywords_still_work():
    """The signature itself carries Accelerate's backend parameters: no plugin has to name the positions."""
    env = {**os.environ, "DRIVETRAIN_BLOCK_PLUGINS": "accelerate_compat"}
    code = ("from drivetrain import Accelerator\n"
            "accelerator = Accelerator(True, False, None, 1, True, None, None, None, None, None, ['torch'])\n"
            "print(accelerator.rng_types, accelerator.fsdp_plugin)\n"
            "print(Accelerator(cpu=True, fsdp_plugin=None).fsdp_plugin)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.splitlines() == ["['torch'] None", "None"], out.stderr


def test_accelerator_state_takes_accelerate_s_backend_arguments_by_position():
    from drivetrain.state import AcceleratorState

    marker = object()
    state = AcceleratorState("no", True, None, None, marker)  # mixed_precision, cpu, dynamo, deepspeed, fsdp
    assert state.fsdp_plugin is marker and state.deepspeed_plugin is None and state.mixed_precision == "no"
    AcceleratorState._reset_state()
    layout = object()  # Accelerate's fifth backend argument, parallelism_config
    assert AcceleratorState(None, True, None, None, None, None, None, layout).parallelism_config is layout
    AcceleratorState._reset_state()
    with pytest.raises(TypeError, match=r"got multiple values for argument 'fsdp_plugin'"):
        AcceleratorState(None, True, None, None, marker, fsdp_plugin=marker)


# ------------------------------------------------------------------ defaults


def test_gradient_accumulation_plugin_default_is_accelerate_s():
    from drivetrain import Accelerator, GradientAccumulationPlugin

    plugin = GradientAccumulationPlugin()
    assert plugin.num_steps is None
    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    assert accelerator.gradient_accumulation_steps == 1 and accelerator.gradient_state.num_steps == 1
    assert Accelerator(cpu=True, gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=4)) \
        .gradient_accumulation_steps == 4


def test_gradient_state_keeps_only_the_plugin_fields_set_away_from_their_defaults():
    """``plugin_kwargs`` is Accelerate's ``to_kwargs()``: transformers checks that an untouched
    ``sync_each_batch`` is not in it, and reads ``num_steps`` from it."""
    from drivetrain import Accelerator, GradientAccumulationPlugin

    assert GradientAccumulationPlugin(num_steps=2, sync_each_batch=True).to_kwargs() == {
        "num_steps": 2, "sync_each_batch": True}
    state = Accelerator(cpu=True, gradient_accumulation_steps=3).gradient_state
    assert state.plugin_kwargs == {"num_steps": 3}
    assert (state.sync_each_batch, state.sync_with_dataloader, state.adjust_scheduler) == (False, True, False)
    chosen = Accelerator(cpu=True, gradient_accumulation_plugin=GradientAccumulationPlugin(
        num_steps=2, sync_each_batch=True, sync_with_dataloader=False)).gradient_state
    assert chosen.plugin_kwargs == {"num_steps": 2, "sync_each_batch": True, "sync_with_dataloader": False}
    assert chosen.sync_each_batch and not chosen.sync_with_dataloader


def test_scheduler_count_during_accumulation_is_accelerates():
    """Accelerate's ``GradientState.adjust_scheduler`` reads ``plugin_kwargs``, which omits
    defaults: an untouched plugin does not add accumulation micro-steps to the scheduler's
    count, so a ``OneCycleLR`` sized in optimizer steps keeps stepping to its end, as there."""
    import torch

    from drivetrain import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=4)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    assert accelerator.gradient_state.adjust_scheduler is False
    for _ in range(8):  # four optimizer steps
        with accelerator.accumulate(model):
            accelerator.backward(model(torch.ones(1, 2)).sum())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    # one count at construction plus one per optimizer step; every step was taken
    assert scheduler.scheduler._step_count == 5


def test_dynamo_plugin_reads_its_defaults_from_the_environment(monkeypatch):
    from drivetrain.utils import TorchDynamoPlugin

    plain = TorchDynamoPlugin()
    assert (plain.backend, plain.mode, plain.fullgraph, plain.dynamic, plain.use_regional_compilation) == (
        "no", "default", False, None, False)
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "INDUCTOR")
    monkeypatch.setenv("ACCELERATE_DYNAMO_MODE", "max-autotune")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_FULLGRAPH", "True")
    monkeypatch.setenv("DRIVETRAIN_DYNAMO_USE_DYNAMIC", "false")
    monkeypatch.setenv("DRIVETRAIN_DYNAMO_USE_REGIONAL_COMPILATION", "1")
    configured = TorchDynamoPlugin()
    assert (configured.backend, configured.mode, configured.fullgraph, configured.dynamic) == (
        "inductor", "max-autotune", True, False)
    assert configured.use_regional_compilation is True
    assert configured.compile_kwargs() == {"fullgraph": True, "mode": "max-autotune", "dynamic": False}
    # arguments win over the environment
    assert TorchDynamoPlugin(backend="eager", fullgraph=False).fullgraph is False
    monkeypatch.setenv("DRIVETRAIN_DYNAMO_BACKEND", "eager")
    with pytest.raises(ConfigError, match="disagree"):
        TorchDynamoPlugin()


def test_dynamo_plugin_kwargs_count_values_from_the_environment_as_changes(monkeypatch):
    """to_kwargs() compares with the defaults of no arguments and no variables, so options the
    launcher set through the environment are passed on, and the environment is left alone."""
    import os

    from drivetrain.utils import TorchDynamoPlugin

    assert TorchDynamoPlugin().to_kwargs() == {}
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "aot_eager")
    monkeypatch.setenv("ACCELERATE_DYNAMO_MODE", "reduce-overhead")
    monkeypatch.setenv("DRIVETRAIN_DYNAMO_USE_DYNAMIC", "true")
    before = dict(os.environ)
    assert TorchDynamoPlugin().to_kwargs() == {"backend": "aot_eager", "mode": "reduce-overhead", "dynamic": True}
    assert TorchDynamoPlugin(mode="default").to_kwargs() == {"backend": "aot_eager", "dynamic": True}
    assert dict(os.environ) == before


def test_init_process_group_backend_defaults_to_the_platform_s():
    from drivetrain import InitProcessGroupKwargs

    assert InitProcessGroupKwargs().backend is None and InitProcessGroupKwargs().to_kwargs() == {}
    assert InitProcessGroupKwargs("gloo").to_kwargs() == {"backend": "gloo"}


def test_write_basic_config_takes_accelerate_s_arguments_by_position(tmp_path):
    from drivetrain.utils import write_basic_config

    assert list(inspect.signature(write_basic_config).parameters) == ["mixed_precision", "save_location"]
    target = tmp_path / "config.yaml"
    assert write_basic_config("bf16", target) == target and "bf16" in target.read_text()
    assert write_basic_config("no", target) is False and "bf16" in target.read_text()


# ------------------------------------------------------------------ state members


def test_state_members_of_unused_backends_read_as_accelerate_s():
    from drivetrain import Accelerator
    from drivetrain.state import AcceleratorState, GradientState

    Accelerator(cpu=True)
    state = AcceleratorState()
    assert state.is_fsdp2 is False and state.deepspeed_plugins is None and state.deepspeed_plugin is None
    assert state.fsdp_plugin is None and state.megatron_lm_plugin is None and state.torch_tp_plugin is None
    assert state.parallelism_config is None and state.device_mesh is None
    with pytest.raises(ConfigError, match="DeepSpeed is not enabled"):
        state.get_deepspeed_plugin("default")
    with pytest.raises(ConfigError, match="DeepSpeed is not enabled"):
        state.select_deepspeed_plugin("default")
    with pytest.raises(AttributeError):
        state.no_such_member  # noqa: B018 - typos still fail


def test_is_xla_gradients_synced_starts_false_and_is_shared_once_set():
    from drivetrain.state import GradientState

    first = GradientState()
    assert first.is_xla_gradients_synced is False
    first.is_xla_gradients_synced = True
    assert GradientState().is_xla_gradients_synced is True
    GradientState._reset_state()
    assert GradientState().is_xla_gradients_synced is False
    with pytest.raises(AttributeError):
        GradientState().no_such_member  # noqa: B018


def test_a_strategy_s_own_answer_wins_over_the_unused_default():
    from drivetrain import Accelerator
    from drivetrain.state import AcceleratorState

    accelerator = Accelerator(cpu=True)
    assert accelerator.state.is_fsdp2 is False

    class Extension:
        is_fsdp2 = "from the active plugin"

    accelerator.run.extensions.append(Extension())
    assert AcceleratorState().is_fsdp2 == "from the active plugin" == accelerator.is_fsdp2
