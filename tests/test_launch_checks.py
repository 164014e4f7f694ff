"""`drivetrain launch` refuses bad options with one line before any process starts, and a
variable that selects a backend nothing installed provides is an error (in-process: each case
fails before a process would be started, so a started process means the check is missing)."""

from __future__ import annotations

import subprocess

import pytest

from drivetrain.cli.main import main
from drivetrain.errors import ConfigError, PluginSelectionError


@pytest.fixture
def launch(monkeypatch, tmp_path, capsys):
    """``drivetrain launch ARGS`` in this process; returns (exit code, stderr). Starting a
    process fails the test: every case here must be refused before that."""
    for key in list(__import__("os").environ):
        if key.startswith(("DRIVETRAIN_", "ACCELERATE_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('RAN')\n")

    def refuse(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)

    def run(*argv: str, script: str = "train.py") -> tuple[int, str]:
        code = main(["launch", "--cpu", *argv, *([script] if script else [])])
        return code, capsys.readouterr().err

    return run


@pytest.mark.parametrize("argv, message", [
    (("--num-processes", "0"), "--num-processes must be at least 1, not 0"),
    (("--num_processes", "-2"), "--num-processes must be at least 1, not -2"),
    (("--num-machines", "0"), "--num-machines must be at least 1, not 0"),
    (("--main-process-port", "99999"), "--main-process-port must be a port number between 1 and 65535, not 99999"),
    (("--main-process-port", "0"), "--main-process-port must be a port number between 1 and 65535, not 0"),
    (("--max-restarts", "-1"), "--max-restarts must be at least 0, not -1"),
    (("--gradient-accumulation-steps", "0"), "--gradient-accumulation-steps must be at least 1, not 0"),
    (("--gradient_accumulation_steps", "-1"), "--gradient-accumulation-steps must be at least 1, not -1"),
    (("--dynamo-backend", "nosuch"), "--dynamo-backend is 'nosuch'; torch.compile here knows: no, eager"),
    (("--rdzv-backend", "nosuch"), "--rdzv-backend is 'nosuch'; allowed: static, c10d, etcd, etcd-v2"),
    (("--num-cpu-threads-per-process", "0"), "--num-cpu-threads-per-process must be at least 1, not 0"),
    (("--timeout", "-5"), "--timeout must be greater than 0, not -5"),
    (("--timeout", "0"), "--timeout must be greater than 0, not 0"),
    (("--monitor-interval", "0"), "--monitor-interval must be greater than 0, not 0"),
    (("--mixed-precision", "fp7"), "--mixed-precision is 'fp7'; installed plugins offer: no, "),
])
def test_a_bad_option_is_one_line_before_anything_starts(launch, argv, message):
    code, err = launch(*argv)
    assert code == 2 and err.startswith("drivetrain: error: " + message), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    if "--mixed-precision" in argv:
        assert {"fp16", "bf16"} <= set(err.split("offer: ")[1].strip().split(", ")), err


@pytest.mark.parametrize("key, value, message", [
    ("gradient_accumulation_steps", 0, "key 'gradient_accumulation_steps' must be at least 1, not 0"),
    ("gradient_accumulation_steps", -1, "key 'gradient_accumulation_steps' must be at least 1, not -1"),
    ("dynamo_config", {"dynamo_backend": "nosuch"}, "dynamo_config.dynamo_backend is 'nosuch'"),
])
def test_a_bad_value_in_the_config_file_is_named_with_the_file(launch, tmp_path, key, value, message):
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({key: value}))
    code, err = launch("--config-file", str(path))
    assert code == 2 and f"config file {path}: {message}" in err, err
    assert len(err.strip().splitlines()) == 1


def test_the_command_line_beats_a_bad_config_value_of_the_same_option(launch, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("dynamo_config:\n  dynamo_backend: nosuch\n")
    code, err = launch("--config-file", str(path), "--dynamo-backend", "alsobad")
    assert code == 2 and "--dynamo-backend is 'alsobad'" in err, err


@pytest.mark.parametrize("argv, script, message", [
    ((), "missing.py", "training script 'missing.py' does not exist (relative to "),
    ((), ".", "training script '.' is a directory, not a script"),
    (("-m",), "no_such_module.sub", "-m: no module named 'no_such_module'"),
    (("--no-python",), "no-such-executable-here", "--no-python: 'no-such-executable-here' is not an executable"),
])
def test_a_missing_target_is_one_line_not_a_traceback_per_process(launch, argv, script, message):
    code, err = launch("--num-processes", "2", *argv, script=script)
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1


def _extra_without_a_plugin() -> str | None:
    """An extra the installed distribution declares whose name no loaded plugin, strategy or
    platform has (what a user who set ACCELERATE_USE_<EXTRA> has not installed yet)."""
    from drivetrain import get_plugin_manager
    from drivetrain.use_variables import _extras

    manager = get_plugin_manager()
    taken = {name.lower() for name in manager.records}
    for hook in ("drivetrain_register_strategies", "drivetrain_register_platforms"):
        taken |= {spec.name.lower() for _p, spec in manager.registrations(hook)}
    return next((extra for extra in _extras() if extra.lower().replace("-", "_") not in taken), None)


def test_a_use_variable_for_an_extra_not_installed_names_the_extra(launch, monkeypatch):
    extra = _extra_without_a_plugin()
    if extra is None:
        pytest.skip("every extra of this distribution has its plugin installed")
    variable = "ACCELERATE_USE_" + extra.upper().replace("-", "_") + "_ENGINE"  # its first word is the extra
    monkeypatch.setenv(variable, "true")
    code, err = launch()
    assert code == 2 and f"{variable}=true selects '{extra.lower().replace('-', '_')}_engine', but no installed " \
        f"plugin provides it; the extra that may provide it: pip install 'drivetrain[{extra}]'" in err, err


def test_a_use_variable_that_names_nothing_installed_stops_the_launch(launch, monkeypatch):
    monkeypatch.setenv("DRIVETRAIN_USE_NO_SUCH_BACKEND", "true")
    code, err = launch()
    assert code == 2 and ("DRIVETRAIN_USE_NO_SUCH_BACKEND=true selects 'no_such_backend', but no installed plugin "
                          "provides a strategy or platform of that name") in err, err


def test_use_variables_select_installed_backends_and_refuse_the_rest():
    from drivetrain import get_plugin_manager
    from drivetrain.selection import requests_from_env

    manager = get_plugin_manager()
    assert requests_from_env(manager, env={"ACCELERATE_USE_FSDP": "true"}).strategy == "fsdp"
    assert requests_from_env(manager, env={"DRIVETRAIN_USE_CPU": "1"}).platform is None  # the cpu request, not a name
    assert requests_from_env(manager, env={"DRIVETRAIN_USE_CUDA": "1"}).platform == "cuda"
    assert requests_from_env(manager, env={"ACCELERATE_USE_XPU": "false"}).strategy is None  # false asks nothing
    assert requests_from_env(manager, env={"ACCELERATE_USE_XPU": "true"}).platform == "xpu"
    with pytest.raises(PluginSelectionError, match=r"ACCELERATE_USE_NPU=true selects 'npu', but no installed plugin"):
        requests_from_env(manager, env={"ACCELERATE_USE_NPU": "true"})
    with pytest.raises(ConfigError, match="ACCELERATE_USE_XPU='maybe' is not a boolean"):
        requests_from_env(manager, env={"ACCELERATE_USE_XPU": "maybe"})


def test_an_unknown_strategy_lists_the_installed_strategies_in_good_english():
    from drivetrain import get_plugin_manager
    from drivetrain.selection import Requests, select

    with pytest.raises(PluginSelectionError, match=r"unknown strategy 'nosuch'; installed strategies: ") as info:
        select(get_plugin_manager(), Requests(strategy="nosuch"))
    assert "strategys" not in str(info.value)


@pytest.mark.parametrize("steps", ["two", 1.5, 0])
def test_the_accelerator_refuses_a_gradient_accumulation_that_is_not_a_count(steps):
    from drivetrain import Accelerator

    with pytest.raises(ConfigError, match=rf"gradient_accumulation_steps must be a whole number of at least 1, "
                                          rf"not {steps!r}"):
        Accelerator(gradient_accumulation_steps=steps, cpu=True)


@pytest.mark.parametrize("flavour, expected", [
    ("openmpi", ["mpirun", "--hostfile", "HOSTS", "--map-by", "ppr:2:node", "-np", "4", "--bind-to", "none",
                 "-x", "DRIVETRAIN_STRATEGY=ddp", "-x", "MASTER_ADDR=10.0.0.1", "-x", "MASTER_PORT=29555"]),
    ("mpich", ["mpirun", "-f", "HOSTS", "-ppn", "2", "-n", "4", "-genv", "DRIVETRAIN_STRATEGY", "ddp",
               "-genv", "MASTER_ADDR", "10.0.0.1", "-genv", "MASTER_PORT", "29555"]),
])
def test_mpirun_hostfile_builds_the_mpirun_command_of_each_mpi(flavour, expected):
    import sys

    from drivetrain.cli.launch_cmd import build_parser
    from drivetrain_mpi.launcher import mpirun_command

    args = build_parser().parse_args(["--cpu", "--num_processes", "4", "--num_machines", "2", "--main_process_ip",
                                      "10.0.0.1", "--main_process_port", "29555", "--mpirun_hostfile", "HOSTS",
                                      "train.py", "--lr", "1"])
    command = mpirun_command(args, flavour, env={"DRIVETRAIN_STRATEGY": "ddp", "HOME": "/home/x"})
    assert command == [*expected, sys.executable, "-m", "drivetrain.cli.child", "--script", "train.py", "--lr", "1"]


def test_mpirun_hostfile_picks_the_mpirun_launcher():
    from drivetrain.cli.launch_cmd import build_parser, choose_launcher

    parser = build_parser()
    args = parser.parse_args(["--cpu", "--num_processes", "2", "--mpirun_hostfile", "HOSTS", "train.py"])
    args.num_machines = 1
    assert choose_launcher(args)[0] == "mpirun"
    args = parser.parse_args(["--cpu", "--num_processes", "2", "train.py"])
    args.num_machines = 1
    assert choose_launcher(args)[0] == "torchrun"


def test_multi_gpu_without_a_gpu_starts_cpu_processes_with_one_warning(capsys):
    from drivetrain.cli.launch_cmd import build_parser
    from drivetrain_cuda.plugin import probe

    args = build_parser().parse_args(["--multi_gpu", "--num_processes", "2", "train.py"])
    err = capsys.readouterr().err
    if probe().available:
        assert args.platform == "cuda" and err == ""
    else:
        assert args.platform is None  # detection picks the CPU
        assert err.count("\n") == 1 and err.startswith("warning: --multi_gpu given but ") \
            and err.rstrip().endswith("starting CPU processes instead"), err


@pytest.mark.parametrize("script, argv, expected", [
    ("drivetrain-launch", ["--cpu", "--num-processes", "0", "train.py"], "--num-processes must be at least 1"),
    ("drivetrain-config", ["--help"], "usage: drivetrain config"),
])
def test_accelerate_style_console_scripts(tmp_path, script, argv, expected):
    import os
    import sys

    path = os.path.join(os.path.dirname(sys.executable), script)
    assert os.path.exists(path), f"{script} is not installed: pip install -e ."
    result = subprocess.run([path, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                            env={**os.environ, "HF_HOME": str(tmp_path)})
    assert expected in result.stdout + result.stderr
