"""`drivetrain launch`'s parser speaks Accelerate's option names, and the environment helpers
of `drivetrain.utils.launch` take the namespaces libraries build (in-process: nothing starts)."""

from __future__ import annotations

import argparse
import re

import pytest

from drivetrain.cli.launch_parser import LaunchParser
from drivetrain.commands.launch import _validate_launch_command, launch_command_parser
from drivetrain.utils.launch import prepare_multi_gpu_env, prepare_simple_launcher_cmd_env


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no config file of the machine's user
    (tmp_path / "train.py").write_text("print('RAN')\n")
    return "train.py"


def test_every_option_takes_both_spellings_and_help_lists_it_once():
    parser = launch_command_parser()
    shown = parser.format_help()
    long_options = [name for action in parser._actions for name in action.option_strings if name.startswith("--")]
    assert "--num_processes" in long_options and "--fsdp_version" in long_options  # a plugin's option too
    for name in long_options:
        underscored, hyphenated = "--" + name[2:].replace("-", "_"), "--" + name[2:].replace("_", "-")
        assert {underscored, hyphenated} <= set(long_options)
        assert re.search(re.escape(underscored) + r"\b", shown), underscored
        if hyphenated != underscored and hyphenated != "--num-processes":  # the description's example
            assert hyphenated not in shown, f"{hyphenated} listed in --help"
    assert shown.count("--num-processes") == 1


def test_an_option_added_with_hyphens_is_shown_with_underscores():
    parser = LaunchParser(prog="x")
    parser.add_argument_group("plugin").add_argument("--my-plugin-level", type=int)
    for spelling in ("--my-plugin-level", "--my_plugin_level"):
        assert parser.parse_args([spelling, "3"]).my_plugin_level == 3
    assert "--my_plugin_level" in parser.format_help() and "--my-plugin-level" not in parser.format_help()


def test_backend_flags_are_false_by_default_and_choose_their_backend():
    parser = launch_command_parser()
    args = parser.parse_args(["train.py"])
    assert (args.cpu, args.multi_gpu, args.use_deepspeed, args.use_fsdp, args.use_megatron_lm) == (False,) * 5
    assert args.strategy is None
    args = parser.parse_args(["--use-megatron-lm", "--num_processes", "4", "train.py"])
    assert args.use_megatron_lm is True and args.strategy == "megatron_lm" and args.num_processes == 4
    args = parser.parse_args(["--use_fsdp", "--strategy", "ddp", "train.py"])
    assert args.use_fsdp is True and args.strategy == "ddp"  # the later option wins, as any option


def test_a_cpu_launch_sets_intel_openmp_placement_and_keeps_the_users(script, monkeypatch):
    monkeypatch.delenv("KMP_AFFINITY", raising=False)
    monkeypatch.delenv("KMP_BLOCKTIME", raising=False)
    parser = launch_command_parser()
    args, _, _ = _validate_launch_command(parser.parse_args(["--cpu", script]))
    _, env = prepare_simple_launcher_cmd_env(args)
    assert env["KMP_AFFINITY"] == "granularity=fine,compact,1,0" and env["KMP_BLOCKTIME"] == "1"
    args, _, _ = _validate_launch_command(parser.parse_args([script]))
    _, env = prepare_simple_launcher_cmd_env(args)
    assert "KMP_AFFINITY" not in env and "KMP_BLOCKTIME" not in env  # the CPU by default, not asked for
    monkeypatch.setenv("KMP_BLOCKTIME", "200")
    args, _, _ = _validate_launch_command(parser.parse_args(["--cpu", script]))
    _, env = prepare_simple_launcher_cmd_env(args)
    assert env["KMP_BLOCKTIME"] == "200"


def test_a_hand_built_namespace_gets_the_defaults_of_what_it_lacks_and_port_zero_a_free_port(script):
    args = argparse.Namespace(num_processes=1, num_machines=1, main_process_ip="127.0.0.1", main_process_port=0,
                              machine_rank=0, module=False, no_python=False, debug=False, mixed_precision="no",
                              training_script=script, training_script_args=[])
    env = prepare_multi_gpu_env(args)
    assert args.config_file is None and args.strategy is None and args.use_fsdp is False  # filled
    assert args.main_process_port > 0 and args.master_port == str(args.main_process_port)
    assert env["DRIVETRAIN_MIXED_PRECISION"] == "no"


def test_validating_a_launch_reads_the_default_config_file(script, monkeypatch, tmp_path):
    config = tmp_path / "default.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 3\n"
                      "mixed_precision: bf16\n")
    monkeypatch.setenv("DRIVETRAIN_CONFIG_FILE", str(config))  # no --config_file: the default one
    args, defaults, precision_from_file = _validate_launch_command(launch_command_parser().parse_args(["--cpu", script]))
    assert defaults.num_processes == 3 and args.num_processes == 3
    assert precision_from_file and args.mixed_precision == "bf16"
