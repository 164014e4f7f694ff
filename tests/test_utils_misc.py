"""Behaviour of the smaller Accelerate-compatible helpers: launch helpers, tqdm, data-loader
mixins, custom state files, optimizer patching, tracker functions, DeepSpeed config questions."""

from __future__ import annotations

import argparse
import os
import sys

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def test_prepare_for_launch_sets_the_rank_variables(monkeypatch):
    from drivetrain.utils import PrepareForLaunch

    for key in ("LOCAL_RANK", "RANK", "NODE_RANK", "FORK_LAUNCHED"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NPROC", "4")
    monkeypatch.setenv("NODE_RANK", "1")
    seen = []
    PrepareForLaunch(lambda *args: seen.append((os.environ["LOCAL_RANK"], os.environ["RANK"], args)),
                     distributed_type="MULTI_CPU")(2, "a", "b")
    assert seen == [("2", "6", ("a", "b"))] and os.environ["FORK_LAUNCHED"] == "1"
    monkeypatch.delenv("LOCAL_RANK")
    PrepareForLaunch(lambda: seen.append("plain"), distributed_type="NO")(0)
    assert seen[-1] == "plain" and "LOCAL_RANK" not in os.environ


def test_simple_launcher_command_and_environment(tmp_path, monkeypatch):
    from drivetrain.commands.launch import launch_command_parser
    from drivetrain.utils import prepare_multi_gpu_env, prepare_simple_launcher_cmd_env

    config = tmp_path / "config.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\n")
    monkeypatch.setenv("DRIVETRAIN_CONFIG_FILE", str(config))
    args = launch_command_parser().parse_args(["--cpu", "--mixed-precision", "bf16", "train.py", "--lr", "1"])
    command, env = prepare_simple_launcher_cmd_env(args)
    assert command == [sys.executable, "train.py", "--lr", "1"]  # Accelerate's form: the script run by Python
    assert env["DRIVETRAIN_USE_CPU"] == "1" and env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    args = launch_command_parser().parse_args(["--cpu", "--num-processes", "2", "train.py"])
    assert prepare_multi_gpu_env(args)["DRIVETRAIN_USE_CPU"] == "1"


def _fake_mpirun(folder, version_text):
    folder.mkdir(exist_ok=True)
    program = folder / "mpirun"
    program.write_text(f"#!/bin/sh\necho '{version_text}'\n")
    program.chmod(0o755)
    return folder


@pytest.mark.parametrize("version_text, placement, exported", [
    ("Intel(R) MPI Library for Linux* OS, Version 2021.10", ["-f", "HOSTFILE", "-ppn", "2", "-n", "4"], False),
    ("mpirun (Open MPI) 4.1.2", ["--hostfile", "HOSTFILE", "--map-by", "ppr:2:node", "-np", "4", "--bind-to", "none"],
     True),
])
def test_the_simple_launcher_command_goes_through_mpirun_from_the_config_file(tmp_path, monkeypatch, version_text,
                                                                            placement, exported):
    from drivetrain.commands.launch import _validate_launch_command, launch_command_parser
    from drivetrain.utils import prepare_simple_launcher_cmd_env

    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node1\nnode2\n")
    config = tmp_path / "mpi.yaml"
    config.write_text(f"distributed_type: MULTI_CPU\nuse_cpu: true\nnum_machines: 2\nnum_processes: 4\n"
                      f"main_process_ip: 10.0.0.1\nmpirun_config:\n  mpirun_hostfile: {hostfile}\n  mpirun_ccl: '2'\n")
    monkeypatch.setenv("PATH", f"{_fake_mpirun(tmp_path / 'bin', version_text)}{os.pathsep}{os.environ['PATH']}")
    args = launch_command_parser().parse_args(["--config_file", str(config), "train.py", "--lr", "1"])
    args, _defaults, _ = _validate_launch_command(args)
    command, env = prepare_simple_launcher_cmd_env(args)
    expected = ["mpirun", *[str(hostfile) if word == "HOSTFILE" else word for word in placement]]
    assert command[:len(expected)] == expected
    assert command[-4:] == [sys.executable, "train.py", "--lr", "1"]
    assert env["CCL_WORKER_COUNT"] == "2"
    between = command[len(expected):-4]
    assert (("-x" in between and "DRIVETRAIN_USE_CPU" in between) if exported else between == [])


def test_the_mpirun_prefix_needs_mpirun(tmp_path, monkeypatch):
    from drivetrain.commands.launch import launch_command_parser
    from drivetrain.errors import LaunchError
    from drivetrain.utils import prepare_simple_launcher_cmd_env

    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun here
    args = launch_command_parser().parse_args(["--cpu", "--mpirun_hostfile", str(tmp_path / "h"), "train.py"])
    with pytest.raises(LaunchError, match="needs 'mpirun' on PATH"):
        prepare_simple_launcher_cmd_env(args)


def test_filter_args_keeps_what_the_parser_knows():
    from drivetrain.utils import _filter_args

    parser = argparse.ArgumentParser()
    parser.add_argument("--known", default=3)
    filtered = _filter_args(argparse.Namespace(known=5, unknown=1), parser)
    assert vars(filtered) == {"known": 5}


def test_tqdm_draws_on_the_main_process_only(monkeypatch):
    from drivetrain import PartialState
    from drivetrain.utils import tqdm

    state = PartialState()
    assert list(tqdm(range(3))) == [0, 1, 2]
    assert tqdm(range(3)).disable is (not state.is_local_main_process)
    assert tqdm(range(3), main_process_only=False).disable is False
    assert tqdm(True, range(2)).total == 2  # Accelerate's older positional form


def test_torch_distributed_operation_types_come_from_the_installed_plugins():
    from drivetrain.utils.constants import TORCH_DISTRIBUTED_OPERATION_TYPES

    assert "MULTI_CPU" in TORCH_DISTRIBUTED_OPERATION_TYPES
    assert all(name.startswith("MULTI_") for name in TORCH_DISTRIBUTED_OPERATION_TYPES)


def test_feature_versions_at_accelerates_constants_path_come_from_the_plugins_that_own_them():
    from packaging.version import Version

    from drivetrain.utils import constants
    from drivetrain_deepspeed import sequence_parallel
    from drivetrain_fsdp.parallelism import config

    for name in ("BETA_TP_AVAILABLE_PYTORCH_VERSION", "BETA_TP_AVAILABLE_TRANSFORMERS_VERSION",
                 "BETA_CP_AVAILABLE_PYTORCH_VERSION"):
        assert getattr(constants, name) is getattr(config, name)
    assert constants.BETA_SP_AVAILABLE_DEEPSPEED_VERSION is sequence_parallel.BETA_SP_AVAILABLE_DEEPSPEED_VERSION
    # usable where Accelerate users put them: is_torch_version(">=", ...), compare_versions(...)
    assert Version(constants.BETA_CP_AVAILABLE_PYTORCH_VERSION) >= Version(constants.BETA_TP_AVAILABLE_PYTORCH_VERSION)


def test_upcasting_layers_are_the_convolutions_and_linear_layers():
    from drivetrain.utils.constants import SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING as layers

    assert isinstance(torch.nn.Linear(2, 2), layers) and isinstance(torch.nn.ConvTranspose2d(1, 1, 1), layers)
    assert not isinstance(torch.nn.LayerNorm(2), layers) and not isinstance(torch.nn.Embedding(2, 2), layers)


def test_data_loader_state_mixin_tells_gradient_state():
    from drivetrain import GradientState
    from drivetrain.data_loader import DataLoaderShard, DataLoaderStateMixin

    class Loader(DataLoaderStateMixin):
        pass

    loader, state = Loader(), GradientState()
    assert loader.end_of_dataloader is False and loader.remainder == -1
    loader.begin()
    assert state.in_dataloader
    loader.end_of_dataloader = True
    loader.end()
    assert not state.in_dataloader
    assert issubclass(DataLoaderShard, DataLoaderStateMixin)


def test_data_loader_adapter_behaves_as_its_loader():
    from drivetrain.data_loader import DataLoaderAdapter

    adapter = DataLoaderAdapter(TensorDataset(torch.arange(10.0)), batch_size=4)
    assert isinstance(adapter, DataLoader) and len(adapter) == 3 and adapter.batch_size == 4
    assert [batch[0].tolist() for batch in adapter][0] == [0.0, 1.0, 2.0, 3.0]


def test_custom_state_round_trip(tmp_path):
    from drivetrain.checkpointing import load_custom_state, save_custom_state

    class Counter:
        def __init__(self, value):
            self.value = value

        def state_dict(self):
            return {"value": self.value, "history": torch.tensor([1, 2])}

        def load_state_dict(self, state):
            self.value = state["value"]

    save_custom_state(Counter(7), tmp_path, index=3)
    assert (tmp_path / "custom_checkpoint_3.pkl").is_file()
    restored = Counter(0)
    load_custom_state(restored, tmp_path, index=3)
    assert restored.value == 7


def test_patch_optimizer_step_records_the_call():
    from drivetrain.optimizer import move_to_device, patch_optimizer_step

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)

    class Holder:
        _accelerate_step_called = False

    holder = Holder()
    step = patch_optimizer_step(holder, optimizer.step)
    model(torch.ones(1, 2)).sum().backward()
    before = model.weight.detach().clone()
    step()
    assert holder._accelerate_step_called and not torch.equal(before, model.weight)
    moved = move_to_device({"step": torch.tensor(1.0), "exp_avg": torch.ones(2)}, torch.device("meta"))
    assert moved["exp_avg"].device.type == "meta" and moved["step"].device.type == "cpu"


def test_tracker_module_functions(tmp_path):
    from drivetrain.tracking import filter_trackers, get_available_trackers, on_main_process

    available = get_available_trackers()
    assert "tensorboard" in available or available == []
    if "tensorboard" in available:
        assert filter_trackers(["tensorboard"], tmp_path) == ["tensorboard"]
    with pytest.raises(Exception, match="unknown tracker"):
        filter_trackers(["no-such-tracker"])

    class Tracker:
        main_process_only = True

        @on_main_process
        def log(self):
            return "logged"

    assert Tracker().log() == "logged"  # a single process is the main one


def test_hf_deepspeed_config_answers_questions(tmp_path):
    import json

    from drivetrain.utils import HfDeepSpeedConfig

    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}}))
    config = HfDeepSpeedConfig(str(path))
    assert config.is_zero2() and not config.is_zero3() and not config.is_offload()
    assert config.get_value("zero_optimization.stage") == 2 and config.get_value("a.b", 5) == 5
    config.del_config_sub_tree("zero_optimization.offload_optimizer")
    assert config.get_value("zero_optimization.offload_optimizer") is None


def test_fsdp_helpers_from_the_fsdp_plugin(monkeypatch):
    from drivetrain.utils import (
        compile_regions_fsdp2,
        disable_fsdp_ram_efficient_loading,
        enable_fsdp_ram_efficient_loading,
        fsdp2_canonicalize_names,
        get_fsdp2_grad_scaler,
    )

    monkeypatch.delenv("FSDP_CPU_RAM_EFFICIENT_LOADING", raising=False)
    monkeypatch.delenv("DRIVETRAIN_FSDP_CPU_RAM_EFFICIENT_LOADING", raising=False)
    enable_fsdp_ram_efficient_loading()
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "True"  # Accelerate's spelling
    assert os.environ["DRIVETRAIN_FSDP_CPU_RAM_EFFICIENT_LOADING"] == "True"
    disable_fsdp_ram_efficient_loading()
    assert os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "False"
    names = fsdp2_canonicalize_names({"_orig_mod.layers.0._checkpoint_wrapped_module.weight": 1})
    assert names == {"layers.0.weight": 1}
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    compile_regions_fsdp2(model, backend="eager")
    assert all(layer._compiled_call_impl is not None for layer in model)
    assert isinstance(get_fsdp2_grad_scaler(enabled=False), torch.amp.GradScaler)


class NotATracker:
    """register_tracker_class refuses classes that are not GeneralTracker subclasses."""


def test_register_tracker_class_makes_log_with_select_it(fresh_state):
    from drivetrain import Accelerator
    from drivetrain.errors import ConfigError
    from drivetrain.tracking import GeneralTracker, get_available_trackers, register_tracker_class

    rows = []

    @register_tracker_class
    class MemoryTracker(GeneralTracker):
        name = "memory-test"
        requires_logging_directory = False

        def __init__(self, run_name, **kwargs):
            super().__init__()
            self.run_name = run_name

        @property
        def tracker(self):
            return rows

        def log(self, values, step=None, **kwargs):
            rows.append((self.run_name, step, values))

    assert "memory-test" in get_available_trackers()
    accelerator = Accelerator(cpu=True, log_with=["memory-test"])
    accelerator.init_trackers("run-a")
    accelerator.log({"loss": 1.0}, step=3)
    assert rows == [("run-a", 3, {"loss": 1.0})]
    assert isinstance(accelerator.get_tracker("memory-test"), MemoryTracker)
    with pytest.raises(ConfigError, match="GeneralTracker subclass"):
        register_tracker_class(NotATracker)
