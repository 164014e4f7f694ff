"""Accelerate's backend helpers at ``drivetrain.utils`` (from the fsdp and deepspeed plugins),
``checkpointing.save_accelerator_state``/``load_accelerator_state`` and the SageMaker refusal."""

from __future__ import annotations

import sys

import pytest
import torch

from drivetrain.errors import CheckpointError, ConfigError, LaunchError


@pytest.fixture
def clean_env(clean_env, fresh_state):
    """The shared clean environment, and a fresh process state."""
    return clean_env


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block() for _ in range(3)])
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _fsdp2_accelerator(**options):
    from drivetrain import Accelerator, FullyShardedDataParallelPlugin

    return Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2, **options))


def _full(model) -> dict[str, torch.Tensor]:
    from torch.distributed.tensor import DTensor

    return {name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
            for name, p in model.named_parameters()}


# ------------------------------------------------------------------ fsdp


@pytest.mark.usefixtures("fresh_state", "private_group")
def test_fsdp2_prepare_model_and_load_full_state_dict(clean_env):
    from drivetrain.utils import fsdp2_load_full_state_dict, fsdp2_prepare_model

    accelerator = _fsdp2_accelerator()
    torch.manual_seed(0)
    model = Net()
    assert fsdp2_prepare_model(accelerator, model) is model
    assert all(type(p).__name__ == "DTensor" for p in model.parameters())
    assert fsdp2_prepare_model(accelerator, model) is model  # already sharded: left as it is
    wanted = {name: torch.full(p.shape, float(i)) for i, (name, p) in enumerate(Net().named_parameters())}
    fsdp2_load_full_state_dict(accelerator, model, wanted)
    assert all(torch.equal(_full(model)[name], value) for name, value in wanted.items())


@pytest.mark.usefixtures("fresh_state", "private_group")
def test_fsdp2_prepare_model_needs_fsdp2(clean_env):
    from drivetrain import Accelerator, FullyShardedDataParallelPlugin
    from drivetrain.utils import fsdp2_prepare_model

    accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=1))
    with pytest.raises(ConfigError, match="needs fsdp_version=2"):
        fsdp2_prepare_model(accelerator, Net())


@pytest.mark.usefixtures("fresh_state", "private_group")
def test_fsdp2_apply_ac_wraps_the_chosen_units_and_keeps_the_result(clean_env):
    from drivetrain.utils import fsdp2_apply_ac

    accelerator = _fsdp2_accelerator(auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_cls_names_to_wrap=["Block"])
    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 4)
    before = model(x)
    assert fsdp2_apply_ac(accelerator, model) is model
    wrapped = [name for name, module in model.named_modules() if type(module).__name__ == "CheckpointWrapper"]
    assert wrapped == ["blocks.0", "blocks.1", "blocks.2"]
    assert torch.allclose(model(x), before)
    plain = _fsdp2_accelerator(auto_wrap_policy="NO_WRAP")
    with pytest.raises(ConfigError, match="NO_WRAP makes no units"):
        fsdp2_apply_ac(plain, Net())


def test_fsdp2_switch_optimizer_parameters():
    from drivetrain.utils import fsdp2_switch_optimizer_parameters

    old, new = Net(), Net()
    optimizer = torch.optim.SGD(old.parameters(), lr=0.1)
    mapping = {a.data_ptr(): b for a, b in zip(old.parameters(), new.parameters())}
    fsdp2_switch_optimizer_parameters(optimizer, mapping)
    assert all(a is b for a, b in zip(optimizer.param_groups[0]["params"], new.parameters()))
    with pytest.raises(ConfigError, match="no sharded counterpart"):
        fsdp2_switch_optimizer_parameters(torch.optim.SGD(Net().parameters(), lr=0.1), mapping)


@pytest.mark.usefixtures("fresh_state", "private_group")
@pytest.mark.parametrize("state_dict_type", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_save_and_load_fsdp_model_and_optimizer(clean_env, tmp_path, state_dict_type):
    from drivetrain.utils import load_fsdp_model, load_fsdp_optimizer, save_fsdp_model, save_fsdp_optimizer

    accelerator = _fsdp2_accelerator(state_dict_type=state_dict_type)
    plugin = accelerator.state.fsdp_plugin
    torch.manual_seed(0)
    model = Net()
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=0.01))
    x = torch.randn(3, 4).to(accelerator.device)

    def step():
        accelerator.backward(model(x).sum())
        optimizer.step()
        optimizer.zero_grad()

    step()
    written = save_fsdp_model(plugin, accelerator, model, str(tmp_path))
    written += save_fsdp_optimizer(plugin, accelerator, optimizer, model, str(tmp_path))
    assert written and all((tmp_path / name).is_file() for name in written)
    # the model's folder has Accelerate's name, which merge_fsdp_weights takes as its docs say
    assert {name.split("/")[0] for name in written} == {"pytorch_model_fsdp_0", "optimizer_0"}
    saved_weights = _full(model)
    if state_dict_type == "SHARDED_STATE_DICT":
        from safetensors.torch import load_file

        from drivetrain.utils import merge_fsdp_weights

        accelerator.wait_for_everyone()
        merge_fsdp_weights(str(tmp_path / "pytorch_model_fsdp_0"), str(tmp_path / "merged"))
        merged = load_file(tmp_path / "merged" / "model.safetensors")
        assert all(torch.equal(merged[n], w) for n, w in saved_weights.items())
    step()
    assert not all(torch.equal(saved_weights[n], w) for n, w in _full(model).items())
    load_fsdp_model(plugin, accelerator, model, str(tmp_path))
    load_fsdp_optimizer(plugin, accelerator, optimizer, model, str(tmp_path))
    assert all(torch.equal(saved_weights[n], w) for n, w in _full(model).items())
    # the restored optimizer takes the same step as the one that was saved
    step()
    again = _full(model)
    load_fsdp_model(plugin, accelerator, model, str(tmp_path))
    load_fsdp_optimizer(plugin, accelerator, optimizer, model, str(tmp_path))
    step()
    assert all(torch.equal(again[n], w) for n, w in _full(model).items())
    with pytest.raises(ConfigError, match="adapter_only=True is not supported"):
        save_fsdp_model(plugin, accelerator, model, str(tmp_path), adapter_only=True)


# ------------------------------------------------------------------ deepspeed


def test_compile_regions_deepspeed_compiles_blocks_in_place():
    from drivetrain.utils import compile_regions_deepspeed

    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 4)
    before = model(x)
    assert compile_regions_deepspeed(model, backend="eager") is None
    assert all(block._compiled_call_impl is not None for block in model.blocks)
    assert model._compiled_call_impl is None and model.head._compiled_call_impl is None
    assert torch.allclose(model(x), before)
    single = torch.nn.Linear(4, 2)
    compile_regions_deepspeed(single, backend="eager")  # no repeated blocks: the whole module
    assert single._compiled_call_impl is not None


def test_map_pytorch_optim_to_deepspeed_refuses_what_deepspeed_has_no_cpu_optimizer_for():
    from drivetrain.utils import map_pytorch_optim_to_deepspeed, is_deepspeed_available

    if not is_deepspeed_available():
        pytest.skip("DeepSpeed is not installed")
    with pytest.raises(ConfigError, match="DeepSpeed has no CPU optimizer for SGD"):
        map_pytorch_optim_to_deepspeed(torch.optim.SGD(Net().parameters(), lr=0.1))


@pytest.mark.slow  # the first call builds DeepSpeed's CPU Adam extension (minutes; cached afterwards)
@pytest.mark.usefixtures("deepspeed_ops")  # CPU Adam, built once for the session (skipped without DeepSpeed)
def test_map_pytorch_optim_to_deepspeed_steps_like_the_torch_optimizer():
    from drivetrain.utils import map_pytorch_optim_to_deepspeed

    torch.manual_seed(0)
    ours, theirs = Net(), Net()
    theirs.load_state_dict(ours.state_dict())
    reference = torch.optim.AdamW(theirs.parameters(), lr=0.01, weight_decay=0.1, betas=(0.8, 0.95))
    converted = map_pytorch_optim_to_deepspeed(
        torch.optim.AdamW(ours.parameters(), lr=0.01, weight_decay=0.1, betas=(0.8, 0.95)))
    assert type(converted).__name__ == "DeepSpeedCPUAdam" and converted.adam_w_mode
    x = torch.randn(5, 4)
    for model, optimizer in ((ours, converted), (theirs, reference)):
        for _ in range(3):
            model(x).pow(2).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(ours.parameters(), theirs.parameters()))


def test_prepare_deepspeed_cmd_env(clean_env, tmp_path):
    from drivetrain.commands.launch import launch_command_parser
    from drivetrain.utils import is_deepspeed_available, prepare_deepspeed_cmd_env

    if not is_deepspeed_available():
        pytest.skip("DeepSpeed is not installed")
    config = tmp_path / "config.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\n")
    clean_env.setenv("DRIVETRAIN_CONFIG_FILE", str(config))
    args = launch_command_parser().parse_args(["--cpu", "--use-deepspeed", "--num-processes", "2",
                                               "train.py", "--lr", "1"])
    command, env = prepare_deepspeed_cmd_env(args)
    assert command[:4] == [sys.executable, "-u", "-m", "deepspeed.launcher.runner"]
    assert command[command.index("--num_gpus") + 1] == "2" and command[command.index("--num_nodes") + 1] == "1"
    assert command[-4:] == ["--script", "train.py", "--lr", "1"] and "drivetrain.cli.child" in command
    assert env["DS_ACCELERATOR"] == "cpu" and env["DRIVETRAIN_STRATEGY"] == "deepspeed"


# ------------------------------------------------------------------ checkpointing and launch


@pytest.mark.usefixtures("fresh_state")
def test_save_and_load_accelerator_state(tmp_path):
    from drivetrain import Accelerator
    from drivetrain.checkpointing import load_accelerator_state, save_accelerator_state

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    accelerator.backward(model(torch.randn(2, 4)).sum())
    optimizer.step()
    scheduler.step()
    saved = {name: p.detach().clone() for name, p in model.named_parameters()}
    directory = save_accelerator_state(tmp_path / "ckpt", [accelerator.get_state_dict(model)], [optimizer],
                                       [scheduler], [], 0, step=7)
    accelerator.wait_for_everyone()  # the commit is in place afterwards
    assert (directory / "manifest.json").is_file()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    scheduler.step()
    accelerator.step = 0
    assert load_accelerator_state(directory, [model], [optimizer], [scheduler], [], 0) == {"step": 7}
    assert all(torch.equal(saved[n], p) for n, p in model.named_parameters())
    assert scheduler.get_last_lr() == [0.05]
    with pytest.raises(ConfigError, match="not the ones the Accelerator prepared"):
        save_accelerator_state(tmp_path / "other", [accelerator.get_state_dict(model)],
                               [torch.optim.SGD(Net().parameters(), lr=0.1)], [scheduler], [], 0, step=1)
    with pytest.raises(ConfigError, match="process_index 1 is not this process's"):
        load_accelerator_state(directory, [model], [optimizer], [scheduler], [], 1)


@pytest.mark.usefixtures("fresh_state")
def test_accelerator_state_functions_need_an_accelerator(tmp_path):
    from drivetrain.checkpointing import save_accelerator_state

    with pytest.raises(CheckpointError, match="build one and prepare them first"):
        save_accelerator_state(tmp_path, [], [], [], [], 0, step=0)


@pytest.mark.usefixtures("fresh_state")
def test_the_run_carries_the_newest_accelerators_session_weakly():
    # save/load_accelerator_state find the objects through the run's session; the run outlives
    # the Accelerators sharing it and must not keep what they prepared alive
    import gc
    import weakref

    from drivetrain import Accelerator

    first = Accelerator()
    second = Accelerator()
    assert first.session is not second.session and second.run.session is second.session
    assert second._prepared is second.session.prepared and first.step == 0
    second.step = 7
    assert second.session.step == 7 and first.session.step == 0
    session, run = weakref.ref(second.session), second.run
    del second
    gc.collect()
    assert session() is None and run.session is None


def test_sagemaker_launch_is_refused_with_what_to_do():
    import argparse

    from drivetrain.utils import prepare_sagemager_args_inputs

    with pytest.raises(LaunchError, match="cannot launch on Amazon SageMaker"):
        prepare_sagemager_args_inputs(object(), argparse.Namespace())
