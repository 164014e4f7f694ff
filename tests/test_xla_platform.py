"""The xla platform plugin's contract, here and wherever torch_xla is missing: registered,
refused without torch_xla (with the install command), owner of Accelerate's TPU keys, its
launch options, pod commands, bf16 variables and helpers. The platform runs for real in
tests/test_xla_runtime.py (``scripts/test-xla``)."""

from __future__ import annotations

import importlib.util

import pytest

from drivetrain.cluster import ClusterEnvironment
from drivetrain.config import config_from_dict
from drivetrain.errors import ConfigError, PluginSelectionError
from drivetrain.plugin_manager import PluginStatus, get_plugin_manager
from drivetrain.selection.choice import Requests, select

HAS_XLA = importlib.util.find_spec("torch_xla") is not None


def test_spec_and_status():
    manager = get_plugin_manager()
    xla = next(s for p, s in manager.registrations("drivetrain_register_platforms") if s.name == "xla")
    assert (xla.multi_process_type, xla.single_process_type, xla.communication) == ("XLA", "XLA", None)  # its own collectives
    record = manager.records["xla"]
    if not HAS_XLA:
        assert record.status is PluginStatus.UNAVAILABLE
        assert record.install == "pip install 'drivetrain[xla]'"


@pytest.mark.skipif(HAS_XLA, reason="torch_xla is installed here")
def test_selection_and_config_name_the_install_command():
    with pytest.raises(PluginSelectionError, match=r"platform 'xla' \(plugin 'xla'\) cannot be used: .*drivetrain\[xla\]"):
        select(get_plugin_manager(), Requests(platform="xla"), cluster=ClusterEnvironment("t"))
    with pytest.raises(ConfigError, match=r"key 'downcast_bf16' belongs to plugin 'xla'"):
        config_from_dict({"downcast_bf16": "yes"})
    defaults = config_from_dict({"downcast_bf16": "no", "tpu_env": [], "tpu_use_sudo": False, "tpu_name": None})
    assert defaults.get("downcast_bf16") == "no" and defaults.get("tpu_env") == []


def test_probe_reads_the_environment_and_never_prefers_the_host_cpu(monkeypatch):
    from drivetrain_xla.plugin import probe

    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    answer = probe()
    assert not answer.available
    assert ("drivetrain[xla]" in answer.reason) if not HAS_XLA else ("PJRT_DEVICE" in answer.reason)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert probe().available is HAS_XLA


def _launch_args(*argv: str):
    from drivetrain.cli.launch_cmd import build_parser

    return build_parser().parse_args(list(argv))


def test_tpu_launch_options_in_both_spellings():
    from drivetrain_xla.launcher import applies, main_function, spawn_command

    args = _launch_args("--tpu", "--tpu_cluster", "--tpu_use_sudo", "--vm", "vm-a", "--vm", "vm-b,vm-c", "--env",
                        "A=1", "--main_training_function", "train", "--downcast_bf16", "run.py", "--lr", "1")
    assert (args.tpu, args.tpu_use_cluster, args.tpu_use_sudo, args.downcast_bf16) == (True, True, True, True)
    assert (args.tpu_vm, args.tpu_env, args.main_training_function) == (["vm-a", "vm-b,vm-c"], ["A=1"], "train")
    assert applies(args) and not applies(_launch_args("run.py"))
    dashed = _launch_args("--tpu-use-cluster", "--main-training-function", "f", "run.py")
    assert dashed.tpu_use_cluster and main_function(dashed) == "f"
    args.num_processes = 1
    assert spawn_command(args)[1:] == ["-m", "drivetrain_xla.spawn", "--function", "train", "--nprocs", "1",
                                       "--script", "run.py", "--lr", "1"]


def test_pod_commands_repeat_the_launch_on_every_vm():
    from types import SimpleNamespace

    from drivetrain.errors import LaunchError
    from drivetrain_xla.launcher import pod_commands

    args = _launch_args("--tpu", "--tpu-use-cluster", "--tpu-use-sudo", "--env", "A=1", "--mixed-precision", "bf16",
                        "--downcast-bf16", "train.py", "--epochs", "2")
    args.config = SimpleNamespace(sections={"tpu_name": "pod", "tpu_zone": "us-a"}, main_training_function="main")
    (command,) = pod_commands(args)
    assert command[:9] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "pod", "--zone", "us-a", "--worker"]
    remote = command[-1]
    assert remote.startswith("export A=1; sudo ") and "-m drivetrain launch --tpu --main-training-function main" in remote
    assert remote.endswith("--mixed-precision bf16 --downcast-bf16 train.py --epochs 2")
    args.tpu_vm = ["vm-a,vm-b"]
    assert [c[:4] for c in pod_commands(args)] == [["gcloud", "compute", "ssh", "vm-a"], ["gcloud", "compute", "ssh",
                                                                                          "vm-b"]]
    args.config = SimpleNamespace(sections={}, main_training_function="main")
    with pytest.raises(LaunchError, match="tpu_zone"):
        pod_commands(args)


def test_launch_tpu_without_an_xla_platform_names_the_fix():
    from drivetrain.errors import LaunchError
    from drivetrain_xla.launcher import launch_xla

    args = _launch_args("--tpu", "run.py")
    args.platform = "cpu"
    with pytest.raises(LaunchError, match="PJRT_DEVICE=CPU"):
        launch_xla(args)


def test_bf16_variables_prepare_tpu_and_install_command(monkeypatch):
    from types import SimpleNamespace

    import drivetrain.utils as utils
    from drivetrain_xla.helpers import bf16_environment, install_xla_command
    from drivetrain_xla.plugin import drivetrain_launch_environment

    assert bf16_environment("bf16", "yes") == {"XLA_DOWNCAST_BF16": "1"}
    assert bf16_environment("bf16", False) == {"XLA_USE_BF16": "1"} and bf16_environment("no", True) == {}
    args = SimpleNamespace(mixed_precision="bf16", downcast_bf16=True, debug=True, tpu_vm=["a"], tpu_use_cluster=True)
    args, env = utils.prepare_tpu(args, {"KEEP": "1"}, pod=True)
    assert env == {"KEEP": "1", "XLA_DOWNCAST_BF16": "1", "DRIVETRAIN_DEBUG_MODE": "true",
                   "ACCELERATE_DEBUG_MODE": "true"}
    assert args.tpu_vm is None and args.tpu_use_cluster is None
    assert install_xla_command(torch_version="2.9.0+cu128")[-1] == "torch-xla==2.9.0"
    assert "--upgrade" in install_xla_command(upgrade=True, torch_version="2.9.0")
    assert callable(utils.install_xla)
    on_xla = SimpleNamespace(platform="xla", mixed_precision="bf16", downcast_bf16=None,
                             config=config_from_dict({"downcast_bf16": "no"}) if HAS_XLA else None)
    assert drivetrain_launch_environment(on_xla) == {"XLA_USE_BF16": "1"}
    elsewhere = SimpleNamespace(platform="cpu", mixed_precision="no", downcast_bf16=True, config=None)
    assert drivetrain_launch_environment(elsewhere) == {"XLA_DOWNCAST_BF16": "1"}


def test_xla_members_and_gradient_flag_default():
    from drivetrain import DistributedType
    from drivetrain.enums import RNGType
    from drivetrain.state import GradientState

    assert DistributedType.XLA == "XLA" and RNGType.XLA == "xla"
    assert GradientState().is_xla_gradients_synced is False
