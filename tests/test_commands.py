"""Accelerate's ``commands`` modules and the commands plugins add: run end to end (in this process,
except the installed console scripts and an import in a fresh interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

BIN = Path(sys.executable).parent


@pytest.fixture
def drivetrain(cli):
    """The commands plugins add are parsed and run by ``drivetrain``'s own main, in this process."""
    return cli


FSDP1 = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "FSDP",
    "mixed_precision": "no",
    "num_processes": 2,
    "fsdp_config": {
        "fsdp_sharding_strategy": "SHARD_GRAD_OP",
        "fsdp_backward_prefetch": "BACKWARD_PRE",
        "fsdp_use_orig_params": True,
        "fsdp_sync_module_states": True,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_offload_params": False,
    },
}


def test_to_fsdp2_rewrites_an_fsdp1_config(drivetrain, tmp_path):
    source, target = tmp_path / "fsdp1.yaml", tmp_path / "fsdp2.yaml"
    source.write_text(yaml.safe_dump(FSDP1))
    result = drivetrain("to-fsdp2", "--config_file", str(source), "--output_file", str(target))
    assert result.returncode == 0, result.stderr
    section = yaml.safe_load(target.read_text())["fsdp_config"]
    assert section == {"fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_offload_params": False,
                       "fsdp_reshard_after_forward": False, "fsdp_version": 2}
    assert "fsdp_sharding_strategy SHARD_GRAD_OP -> fsdp_reshard_after_forward False" in result.stdout
    # the converted file is one drivetrain reads
    from drivetrain.config import load_config

    assert load_config(target).sections["fsdp_config"]["fsdp_version"] == 2


def test_to_fsdp2_refuses_to_overwrite_and_leaves_an_fsdp2_file_as_it_is(drivetrain, tmp_path, caplog):
    source, target = tmp_path / "fsdp1.yaml", tmp_path / "out.yaml"
    source.write_text(yaml.safe_dump(FSDP1))
    target.write_text("keep me")
    result = drivetrain("to-fsdp2", "--config-file", str(source), "--output-file", str(target))
    assert result.returncode == 2 and "--overwrite" in result.stderr and target.read_text() == "keep me"
    assert drivetrain("to-fsdp2", "--config-file", str(source), "--output-file", str(target),
                      "--overwrite").returncode == 0
    again = drivetrain("to-fsdp2", "--config-file", str(target), "--output-file", str(tmp_path / "x.yaml"))
    assert again.returncode == 0 and "Config already specifies FSDP2, skipping conversion" in caplog.text
    assert yaml.safe_load((tmp_path / "x.yaml").read_text()) == yaml.safe_load(target.read_text())


def test_to_fsdp2_rewrites_in_place_only_when_told(drivetrain, tmp_path):
    source = tmp_path / "fsdp1.yaml"
    source.write_text(yaml.safe_dump(FSDP1))
    refused = drivetrain("to-fsdp2", "--config_file", str(source))
    assert refused.returncode == 2 and "--output_file PATH, or --overwrite" in refused.stderr
    assert yaml.safe_load(source.read_text()) == FSDP1
    assert drivetrain("to-fsdp2", "--config_file", str(source), "--overwrite").returncode == 0
    assert yaml.safe_load(source.read_text())["fsdp_config"]["fsdp_version"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["fsdp1.yaml"]  # no temporary file left behind


def test_to_fsdp2_errors_are_the_builtin_kinds_too(tmp_path):
    from drivetrain.commands.to_fsdp2 import to_fsdp2_command, to_fsdp2_command_parser
    from drivetrain.errors import ConfigError

    parser = to_fsdp2_command_parser()
    source, target = tmp_path / "fsdp1.yaml", tmp_path / "out.yaml"
    with pytest.raises(FileNotFoundError, match="not found") as missing:
        to_fsdp2_command(parser.parse_args(["--config_file", str(tmp_path / "none.yaml"), "--output_file", "o"]))
    source.write_text(yaml.safe_dump(FSDP1))
    target.write_text("x")
    with pytest.raises(FileExistsError, match="already exists; pass --overwrite") as exists:
        to_fsdp2_command(parser.parse_args(["--config_file", str(source), "--output_file", str(target)]))
    with pytest.raises(ValueError, match="--output_file PATH"):
        to_fsdp2_command(parser.parse_args(["--config_file", str(source)]))
    assert isinstance(missing.value, ConfigError) and isinstance(exists.value, ConfigError)


def test_the_to_fsdp2_module_is_the_plugins_so_patching_it_reaches_the_command(tmp_path, monkeypatch):
    import drivetrain.commands.to_fsdp2 as module
    from drivetrain.commands.to_fsdp2 import to_fsdp2_command, to_fsdp2_command_parser

    source, target = tmp_path / "fsdp1.yaml", tmp_path / "out.yaml"
    source.write_text(yaml.safe_dump(FSDP1))
    monkeypatch.setattr(module, "load_config", lambda path: {"fsdp_config": {"fsdp_sharding_strategy": "NO_SHARD"}})
    to_fsdp2_command(to_fsdp2_command_parser().parse_args(["--config_file", str(source), "--output_file", str(target)]))
    assert yaml.safe_load(target.read_text()) == {"fsdp_config": {"fsdp_reshard_after_forward": False,
                                                                  "fsdp_version": 2}}


def test_tpu_config_prints_the_gcloud_command(drivetrain, tmp_path):
    config = tmp_path / "tpu.yaml"
    config.write_text(yaml.safe_dump({"compute_environment": "LOCAL_MACHINE", "distributed_type": "NO",
                                      "tpu_name": "pod-1", "tpu_zone": "europe-west4-a",
                                      "commands": ["echo ready"]}))
    result = drivetrain("tpu-config", "--config_file", str(config), "--install_accelerate", "--debug")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("Running gcloud compute tpus tpu-vm ssh pod-1 --zone europe-west4-a --command "
                                     "cd /usr/share; pip install drivetrain -U; echo ready --worker all")
    missing = drivetrain("tpu-config", "--tpu-name", "pod-1", "--debug")
    assert missing.returncode == 2 and "--tpu-zone" in missing.stderr


def test_merge_weights_console_script_answers():
    result = subprocess.run([str(BIN / "drivetrain-merge-weights"), "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "checkpoint_directory" in result.stdout


def test_merge_weights_console_script_reports_a_missing_checkpoint(tmp_path):
    result = subprocess.run([str(BIN / "drivetrain-merge-weights"), str(tmp_path / "none"), str(tmp_path / "out")],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "none" in (result.stderr + result.stdout)


def test_config_update_keeps_values(drivetrain, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"compute_environment": "LOCAL_MACHINE", "distributed_type": "NO",
                                    "mixed_precision": "bf16", "num_processes": 1}))
    result = drivetrain("config", "update", "--config_file", str(path))
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(path.read_text())["mixed_precision"] == "bf16"


def test_command_modules_build_parsers_and_run(tmp_path, capsys):
    import argparse

    from drivetrain.commands.config import config_command, config_command_parser
    from drivetrain.commands.env import env_command, env_command_parser
    from drivetrain.commands.launch import launch_command_parser
    from drivetrain.commands.merge import merge_command_parser
    from drivetrain.commands.test import test_command_parser
    from drivetrain.commands.to_fsdp2 import to_fsdp2_command, to_fsdp2_command_parser
    from drivetrain.commands.tpu import tpu_command_launcher, tpu_command_parser

    path = tmp_path / "default.yaml"
    args = config_command_parser().parse_args(["default", "--config_file", str(path)])
    assert config_command(args) == 0 and yaml.safe_load(path.read_text())["mixed_precision"] == "no"
    report = env_command(env_command_parser().parse_args(["--json"]))
    assert report["report_version"] and '"report_version"' in capsys.readouterr().out
    launch = launch_command_parser().parse_args(["--num-processes", "2", "train.py", "--lr", "1"])
    assert launch.num_processes == 2 and launch.training_script_args == ["--lr", "1"]
    assert test_command_parser().parse_args(["--config_file", "x"]).config_file == "x"
    assert merge_command_parser().parse_args(["a", "b"]).checkpoint_directory == "a"
    source = tmp_path / "f.yaml"
    source.write_text(yaml.safe_dump(FSDP1))
    to = to_fsdp2_command_parser().parse_args(["--config_file", str(source), "--output_file", str(tmp_path / "o")])
    assert to_fsdp2_command(to) == 0
    tpu = tpu_command_parser().parse_args(["--tpu_name", "a", "--tpu_zone", "b", "--command", "ls", "--debug"])
    assert tpu_command_launcher(tpu) == 0 and "ssh a --zone b" in capsys.readouterr().out
    sub = argparse.ArgumentParser().add_subparsers()
    assert env_command_parser(sub).prog.endswith("env") and "env" in sub.choices


def test_a_plugin_command_module_says_when_its_plugin_is_missing():
    code = "import drivetrain.commands.to_fsdp2 as m; m.to_fsdp2_command"
    env = {**os.environ, "DRIVETRAIN_BLOCK_PLUGINS": "fsdp"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 1 and "plugin that provides this command is not installed" in result.stderr


@pytest.mark.parametrize("module", ["config", "env", "launch", "merge", "test", "tpu", "to_fsdp2"])
def test_every_command_module_has_accelerate_s_functions(module):
    import importlib

    mod = importlib.import_module(f"drivetrain.commands.{module}")
    prefix = {"to_fsdp2": "to_fsdp2"}.get(module, module)
    assert callable(getattr(mod, f"{prefix}_command_parser"))
    assert callable(getattr(mod, f"{prefix}_command_launcher" if module == "tpu" else f"{prefix}_command"))


def test_config_args_dataclasses_round_trip_through_yaml_and_json(tmp_path):
    from drivetrain.commands.config.config_args import ClusterConfig, load_config_from_file
    from drivetrain.config.schema import build_schema
    from drivetrain.kernel.plugin_manager import get_plugin_manager

    # every key a config file may hold here is a field, the plugins' keys included
    names = {f for f in ClusterConfig.__dataclass_fields__}
    assert set(build_schema(get_plugin_manager()).owners) <= names
    config = ClusterConfig(compute_environment="LOCAL_MACHINE", distributed_type="multi_cpu", mixed_precision="BF16",
                           use_cpu=True, debug=False, num_processes=2)
    assert config.distributed_type == "MULTI_CPU" and config.mixed_precision == "bf16"
    for name in ("c.yaml", "c.json"):
        path = tmp_path / name
        (config.to_yaml_file if name.endswith("yaml") else config.to_json_file)(path)
        loaded = load_config_from_file(str(path))
        assert type(loaded) is ClusterConfig and loaded.to_dict() == config.to_dict()


def test_load_config_from_file_chooses_the_class_and_reports_bad_files(tmp_path):
    from drivetrain.commands.config.config_args import ClusterConfig, SageMakerConfig, load_config_from_file

    sagemaker = tmp_path / "sm.yaml"
    sagemaker.write_text("compute_environment: AMAZON_SAGEMAKER\ndistributed_type: DATA_PARALLEL\n"
                         "mixed_precision: fp16\nuse_cpu: false\ndebug: false\niam_role_name: role\n")
    loaded = load_config_from_file(str(sagemaker))
    assert isinstance(loaded, SageMakerConfig) and loaded.iam_role_name == "role"
    legacy = tmp_path / "old.yaml"
    legacy.write_text("distributed_type: 'NO'\nfp16: true\nuse_cpu: false\ndebug: false\n")
    loaded = load_config_from_file(str(legacy))  # an old file: no compute_environment, fp16 instead of mixed_precision
    assert isinstance(loaded, ClusterConfig) and loaded.mixed_precision == "fp16"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_config_from_file(str(tmp_path / "missing.yaml"))
    legacy.write_text("distributed_type: 'NO'\nnot_a_key: 1\n")
    with pytest.raises(ValueError, match="not_a_key"):
        load_config_from_file(str(legacy))
    sagemaker.write_text("compute_environment: AMAZON_SAGEMAKER\nnot_a_key: 1\n")
    with pytest.raises(ValueError, match="not_a_key"):
        load_config_from_file(str(sagemaker))


def test_script_arguments_become_typed_hyperparameters():
    from drivetrain.utils.launch import _convert_nargs_to_dict

    assert _convert_nargs_to_dict(["--name", "bert", "--train", "False", "--epochs", "3", "--lr", "5e-5",
                                   "--shift", "-1"]) == {"name": "bert", "train": False, "epochs": 3,
                                                         "lr": 5e-5, "shift": -1}
    with pytest.raises(ValueError, match="--train has no value"):
        _convert_nargs_to_dict(["--train", "--epochs", "3"])


def test_command_helpers_at_accelerates_paths(monkeypatch, capsys):
    import drivetrain.commands.env as env
    from drivetrain.commands.estimate import add_timm_hub_prefix
    from drivetrain.commands.to_fsdp2 import convert_config_to_fsdp2

    assert [add_timm_hub_prefix(n) for n in ("resnet50", "timm/resnet50", "hf-hub:timm/x")] == \
        ["resnet50", "hf-hub:timm/resnet50", "hf-hub:timm/x"]
    converted = convert_config_to_fsdp2({"num_processes": 2, "fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD",
                                                                              "fsdp_use_orig_params": True, "x": 5}})
    assert converted == {"num_processes": 2, "fsdp_config": {"fsdp_reshard_after_forward": True, "x": 5,
                                                             "fsdp_version": 2}}
    monkeypatch.setattr(env, "which", lambda name: None)
    assert env.env_command(env.env_command_parser().parse_args([]))["`drivetrain` bash location"] == "Not found"


def test_validate_launch_command_fills_options_left_at_their_default_from_the_file(tmp_path):
    from drivetrain.commands.launch import _validate_launch_command, launch_command_parser

    config = tmp_path / "c.yaml"
    config.write_text("distributed_type: 'NO'\ndebug: true\nfsdp_config:\n  fsdp_sync_module_states: false\n"
                      "  fsdp_offload_params: true\n")
    parser = launch_command_parser()
    args = parser.parse_args(["--config_file", str(config), "--num_processes", "2", "--fsdp_offload_params", "false",
                              "train.py"])
    assert args.fsdp_sync_module_states is True and not args.debug  # the launcher's defaults, before the file
    args, defaults, _from_file = _validate_launch_command(args)
    assert defaults is not None and args.debug is True and args.fsdp_sync_module_states is False
    assert args.num_processes == 2 and args.fsdp_offload_params is False  # the command line beats the file


def test_load_config_from_file_without_a_file_says_so(monkeypatch, tmp_path):
    from drivetrain.commands.config.config_args import load_config_from_file

    for key in ("DRIVETRAIN_CONFIG_FILE", "ACCELERATE_CONFIG_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(FileNotFoundError, match="there is no config file at .*drivetrain config"):
        load_config_from_file(None)


def test_config_package_has_accelerates_modules_over_drivetrains_config(tmp_path, monkeypatch, capsys):
    import argparse
    import io

    from drivetrain.commands.config import default_config_file, get_config_parser, load_config_from_file
    from drivetrain.commands.config.cluster import get_cluster_input
    from drivetrain.commands.config.config_args import ClusterConfig
    from drivetrain.commands.config.default import default_command_parser, write_basic_config
    from drivetrain.commands.config.update import update_command_parser, update_config
    from drivetrain.config import default_config_path

    assert default_config_file == str(default_config_path()) and callable(load_config_from_file)
    actions = argparse.ArgumentParser().add_subparsers()
    default_command_parser(actions, parents=[])
    update_command_parser(actions, parents=[])
    path = tmp_path / "c.yaml"
    args = actions.choices["default"].parse_args(["--config_file", str(path), "--mixed_precision", "bf16"])
    assert args.func(args) == 0 and load_config_from_file(str(path)).mixed_precision == "bf16"
    assert write_basic_config("no", str(path)) is False  # an existing file is kept
    assert yaml.safe_load(path.read_text())["mixed_precision"] == "bf16"
    path.write_text("distributed_type: 'NO'\nmixed_precision: fp16\n")  # an old, short file
    args = actions.choices["update"].parse_args(["--config_file", str(path)])
    assert args.func(args) == 0 and "num_machines" in yaml.safe_load(path.read_text())
    assert update_config(argparse.Namespace(config_file=str(path))) == path
    assert {"default", "update"} <= set(get_config_parser()._subparsers._group_actions[0].choices)
    # the questionnaire as a function, answered by a program; nothing is written
    monkeypatch.setattr("sys.stdin", io.StringIO("cpu\n1\n2\n\nno\nno\n"))
    asked = get_cluster_input()
    assert isinstance(asked, ClusterConfig) and asked.num_processes == 2 and asked.distributed_type == "MULTI_CPU"


def test_config_utils_ask_and_convert(monkeypatch, capsys):
    from drivetrain.commands.config import config_utils
    from drivetrain.commands.config.sagemaker import get_sagemaker_input
    from drivetrain.errors import UsageError

    answers = iter(["maybe", "yes", "", "7", "1"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    assert config_utils._ask_field("ok? ", config_utils._convert_yes_no_to_bool, error_message="yes or no") is True
    assert "yes or no" in capsys.readouterr().out
    assert config_utils._ask_field("port? ", int, default=29500) == 29500
    precision = config_utils._ask_options("precision?", ["no", "fp16", "bf16"], config_utils._convert_mixed_precision)
    assert precision == "fp16" and "from 0 to 2" in capsys.readouterr().out  # 7 is refused, 1 taken
    assert config_utils._convert_compute_environment(1) == "AMAZON_SAGEMAKER"
    assert "INDUCTOR" in config_utils.DYNAMO_BACKENDS and config_utils._convert_dynamo_backend(
        config_utils.DYNAMO_BACKENDS.index("INDUCTOR")) == "INDUCTOR"
    with pytest.raises(UsageError, match="does not configure SageMaker launches"):
        get_sagemaker_input()


def test_an_unquoted_no_in_an_accelerate_file_means_no(tmp_path):
    from drivetrain.commands.config.config_args import SageMakerConfig, load_config_from_file

    path = tmp_path / "sm.yaml"
    # Accelerate's SageMaker files write NO unquoted, which YAML reads as false
    path.write_text("compute_environment: AMAZON_SAGEMAKER\ndistributed_type: NO\nmixed_precision: no\n"
                    "debug: false\nuse_cpu: false\nec2_instance_type: MY_TYPE\ndebug: false\n")
    config = load_config_from_file(str(path))
    assert isinstance(config, SageMakerConfig) and config.distributed_type == "NO" and config.mixed_precision == "no"
    assert config.ec2_instance_type == "MY_TYPE"
