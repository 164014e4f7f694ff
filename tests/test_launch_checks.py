"""`drivetrain launch` refuses bad options with one line before any process starts, and a
variable that selects a backend nothing installed provides is an error (in-process: each case
fails before a process would be started, so a started process means the check is missing)."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from drivetrain.cli.main import main
from drivetrain.errors import ConfigError, PluginSelectionError


@pytest.fixture
def launch(monkeypatch, tmp_path, capsys):
    """``drivetrain launch ARGS`` in this process; returns (exit code, stderr). Starting a
    process fails the test: every case here must be refused before that."""
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
    (("--main-process-port", "99999"),
     "--main-process-port must be a port number between 1 and 65535 (or 0 for a free one), not 99999"),
    (("--main-process-port", "-1"), "--main-process-port must be a port number between 1 and 65535 (or 0 for a "
                                    "free one), not -1"),
    (("--main_process_port", "0", "--num_machines", "2", "--main_process_ip", "127.0.0.1"),
     "--main-process-port is 0 (a free port of this machine), but the other machines cannot learn it"),
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
    from drivetrain.selection.choice import requests_from_env

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
    from drivetrain.selection.choice import Requests, select

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
    assert choose_launcher(args)[0] == "local"  # one machine: no elastic agent needed
    for option, value in (("tee", "3"), ("log_dir", "logs"), ("rdzv_backend", "c10d"), ("num_machines", 2)):
        changed = argparse.Namespace(**{**vars(args), option: value})
        assert choose_launcher(changed)[0] == "torchrun", option  # what only the agent does


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


# ---- launch, config and environment input that used to reach torch unchecked


@pytest.mark.parametrize("argv, message", [
    (("--main_process_ip", "not an ip!!"), "--main-process-ip 'not an ip!!' is neither an IP address nor a host name"),
    (("--rdzv_conf", "garbage"), "--rdzv-conf 'garbage': 'garbage' is not key=value"),
    (("--rdzv_conf", "join_timeout=-5"), "--rdzv-conf join_timeout='-5' must be a positive number of seconds"),
    (("--rdzv_timeout", "-1"), "--rdzv-timeout must be greater than 0, not -1"),
    (("--tee", "9"), "--tee is '9'; use 0 (none), 1 (stdout), 2 (stderr), 3 (both)"),
    (("--dynamo_mode", "ludicrous"), "--dynamo-mode is 'ludicrous'; allowed: default, reduce-overhead, "),
])
def test_launch_input_reaching_torch_is_refused_first(launch, argv, message):
    code, err = launch(*argv)
    assert code == 2 and err.startswith("drivetrain: error: " + message), err
    assert len(err.strip().splitlines()) == 1


def test_a_per_rank_tee_and_a_host_name_are_accepted():
    from drivetrain.cli.launch_checks import check_choices, check_rendezvous, host_problem
    from drivetrain.cli.launch_cmd import build_parser

    args = build_parser().parse_args(["--tee", "0:3,1:2", "--main_process_ip", "127.0.0.1", "--rdzv_conf",
                                      "join_timeout=900,is_host=true", "train.py"])
    check_choices(args, set())
    check_rendezvous(args, set())
    assert host_problem("localhost") is None and host_problem("::1") is None


def test_a_host_name_that_does_not_resolve_is_named(monkeypatch):
    import socket

    from drivetrain.cli import launch_checks

    def unknown(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", unknown)
    assert launch_checks.host_problem("machine-zero.example") == "does not resolve (Name or service not known)"


def test_a_log_dir_that_is_a_file_is_refused(launch, tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    code, err = launch("--log_dir", "notes.txt")
    assert code == 2 and "--log-dir notes.txt is a file; name a directory" in err, err
    code, err = launch("--log_dir", "notes.txt/logs")
    assert code == 2 and f"--log-dir notes.txt/logs cannot be created: {tmp_path / 'notes.txt'} is a file" in err, err


def test_a_port_in_use_names_a_free_one_before_anything_starts(launch):
    import socket

    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = launch("--num_processes", "2", "--main_process_port", str(port))
    assert code == 2 and f"--main-process-port {port} is already in use on this machine; choose another (e.g. " \
        in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("variable, value, message", [
    ("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "abc", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS='abc' is not a whole number"),
    ("DRIVETRAIN_GRADIENT_ACCUMULATION_STEPS", "0", "DRIVETRAIN_GRADIENT_ACCUMULATION_STEPS='0' must be at least 1"),
    ("DRIVETRAIN_TIMEOUT", "-5", "DRIVETRAIN_TIMEOUT='-5' must be greater than 0"),
    ("ACCELERATE_DYNAMO_MODE", "ludicrous", "ACCELERATE_DYNAMO_MODE='ludicrous' is not allowed; use one of default, "),
])
def test_a_bad_variable_every_child_would_read_stops_the_launch(launch, monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    code, err = launch("--num_processes", "2")
    assert code == 2 and err.startswith("drivetrain: error: " + message), err


def test_the_command_line_replaces_a_bad_variable_the_children_would_not_see(launch, monkeypatch):
    import os

    from drivetrain.cli import launch_cmd

    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "abc")
    monkeypatch.setattr(launch_cmd, "choose_launcher", lambda args: ("fake", lambda args: 0))
    before = dict(os.environ)  # the launcher writes the children's variables into os.environ
    try:
        code, err = launch("--gradient_accumulation_steps", "2")
        assert code == 0 and os.environ["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] == "2", err
    finally:
        os.environ.clear()
        os.environ.update(before)


@pytest.mark.parametrize("variable", ["ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "DRIVETRAIN_GRADIENT_ACCUMULATION_STEPS"])
def test_the_accelerator_names_the_bad_accumulation_variable_it_read(monkeypatch, variable):
    from drivetrain import Accelerator

    monkeypatch.setenv(variable, "abc")
    with pytest.raises(ConfigError, match=rf"^{variable}='abc' is not a whole number$"):
        Accelerator(cpu=True)


def test_torch_compile_modes_and_timeouts_are_checked_where_they_are_read(monkeypatch):
    from datetime import timedelta

    from drivetrain.state import _timeout_from
    from drivetrain.utils import TorchDynamoPlugin

    with pytest.raises(ConfigError, match=r"TorchDynamoPlugin\(mode='ludicrous'\) is not a torch.compile mode"):
        TorchDynamoPlugin(backend="eager", mode="ludicrous")
    monkeypatch.setenv("DRIVETRAIN_DYNAMO_MODE", "ludicrous")
    with pytest.raises(ConfigError, match="DRIVETRAIN_DYNAMO_MODE='ludicrous' is not allowed"):
        TorchDynamoPlugin(backend="eager")
    monkeypatch.setenv("DRIVETRAIN_DYNAMO_MODE", "max-autotune")
    assert TorchDynamoPlugin(backend="eager").mode == "max-autotune"
    for bad in (-5, 0, timedelta(seconds=-1), "soon"):
        with pytest.raises(ConfigError, match="timeout must be a positive number of seconds"):
            _timeout_from(bad)
    assert _timeout_from(30) == timedelta(seconds=30) == _timeout_from(timedelta(seconds=30))


@pytest.mark.parametrize("env, message", [
    ({"LOCAL_RANK": "abc"}, "LOCAL_RANK='abc' is not a whole number; fix or unset LOCAL_RANK"),
    ({"WORLD_SIZE": "-1"}, "torchelastic environment: world size -1 is not at least 1"),
    ({"RANK": "5", "WORLD_SIZE": "2"}, "torchelastic environment: rank 5 is outside 0..1 (world size 2)"),
    ({"MASTER_PORT": "70000"}, "torchelastic environment: port 70000 is not a port number"),
])
def test_rank_variables_that_cannot_describe_a_job_are_one_line(env, message):
    from drivetrain_torchelastic.environment import from_torchelastic

    with pytest.raises(ConfigError) as info:
        from_torchelastic({"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "1", **env})
    assert str(info.value).startswith(message), info.value


def test_accelerate_rank_helpers_name_a_bad_variable(monkeypatch):
    from drivetrain.utils import get_cpu_distributed_information

    monkeypatch.setenv("LOCAL_RANK", "abc")
    with pytest.raises(ConfigError, match="LOCAL_RANK='abc' is not a whole number"):
        get_cpu_distributed_information()


def _write(path, content):
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return path


@pytest.mark.parametrize("name, content, message", [
    ("big.yaml", "distributed_type: MULTI_CPU\nnum_processes: 1000000000000000000000\n",
     "num_processes is 1000000000000000000000: more than 4096 processes per machine on 1 machine(s)"),
    ("binary.yaml", b"\x00\xa1\xff\x10binary", "is not a text file (binary or not UTF-8)"),
    ("latin.yaml", "num_processes: 1\n# caf\xe9\n".encode("latin-1"), "is not a text file (binary or not UTF-8)"),
    ("twice.yaml", "num_processes: 2\nmixed_precision: no\nnum_processes: 1\n",
     "key 'num_processes' is given twice with different values (lines 1 and 3); keep one of them"),
    ("twice.json", '{"num_processes": 2, "num_processes": 1}', "key 'num_processes' is given twice with different values"),
])
def test_a_config_file_that_cannot_be_meant_is_refused(launch, tmp_path, name, content, message):
    path = _write(tmp_path / name, content)
    code, err = launch("--config_file", str(path))
    assert code == 2 and f"config file {path}" in err and message in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_fifo_as_config_file_is_refused_without_reading_it(launch, tmp_path):
    import os

    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    code, err = launch("--config_file", str(fifo))
    assert code == 2 and f"config file {fifo} is not a regular file (a FIFO, socket or device)" in err, err
    code, err = launch("--config_file", str(tmp_path))
    assert code == 2 and f"config file {tmp_path} is a directory" in err, err


@pytest.mark.parametrize("variable", ["XDG_CONFIG_HOME", "HF_HOME"])
def test_a_config_home_that_is_a_file_is_named(launch, monkeypatch, tmp_path, variable):
    (tmp_path / "home-file").write_text("x")
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv(variable, str(tmp_path / "home-file"))
    code, err = launch()
    assert code == 2 and f"{variable}={tmp_path / 'home-file'} is a file, not a directory" in err, err
    code = main(["config", "default"])
    assert code == 2


def test_a_yaml_merge_key_is_not_a_duplicate(tmp_path):
    from drivetrain.config.file import _read

    path = _write(tmp_path / "merge.yaml", "base: &b\n  dynamo_mode: default\ndynamo_config:\n  <<: *b\n"
                                           "  dynamo_mode: max-autotune\n")
    assert _read(path)["dynamo_config"] == {"dynamo_mode": "max-autotune"}  # `<<` may be overridden


def test_the_rendezvous_wait_is_bounded_by_rdzv_timeout():
    from drivetrain.cli.launch_cmd import build_parser
    from drivetrain_torchrun.launcher import torchrun_arguments

    parser = build_parser()

    def argv(*options):
        args = parser.parse_args(["--num_processes", "2", "--num_machines", "2", "--main_process_ip", "10.0.0.1",
                                  "--main_process_port", "29555", *options, "train.py"])
        args.nproc_per_node, args.rdzv_backend = 1, args.rdzv_backend or "static"
        args.machine_rank = args.machine_rank or 0
        return torchrun_arguments(args)

    def conf(arguments):
        return arguments[arguments.index("--rdzv-conf") + 1]

    assert conf(argv()) == "timeout=300"  # torch's static rendezvous would wait 600 s
    assert conf(argv("--rdzv_timeout", "20.5")) == "timeout=21"
    assert conf(argv("--rdzv_backend", "c10d", "--rdzv_conf", "read_timeout=9")) == "read_timeout=9,join_timeout=300"
    assert conf(argv("--rdzv_conf", "timeout=900", "--rdzv_timeout", "5")) == "timeout=900"  # the user's own wins


def test_an_unreachable_machine_zero_ends_the_launch_in_one_line(capsys):
    import socket

    from drivetrain.cli.launch_cmd import build_parser
    from drivetrain_torchrun.launcher import launch_torchrun

    with socket.socket() as probe:  # a loopback port nobody listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = build_parser().parse_args(["--cpu", "--num_processes", "2", "--num_machines", "2", "--machine_rank", "1",
                                      "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
                                      "--rdzv_timeout", "1", "train.py"])
    args.nproc_per_node, args.rdzv_backend = 1, "static"
    assert launch_torchrun(args) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"drivetrain launch: no rendezvous with machine 0 at 127.0.0.1:{port}: ") \
        and last.endswith("or wait longer with --rdzv-timeout (now 1.0 s)"), last


def test_port_zero_on_one_machine_is_accepted_and_launches_on_a_free_port():
    from drivetrain.cli import launch_checks
    from drivetrain.cli.launch_cmd import build_parser
    from drivetrain_torchrun.launcher import torchrun_arguments

    args = build_parser().parse_args(["--num_processes", "2", "--main_process_port", "0", "train.py"])
    given = launch_checks.given_on_command_line(args)
    launch_checks.check_numbers(args, given)
    launch_checks.check_rendezvous(args, given)
    launch_checks.check_port_free(args, given)
    args.num_machines, args.nproc_per_node, args.rdzv_backend, args.machine_rank = 1, 2, "static", 0
    argv = torchrun_arguments(args)
    assert "--standalone" in argv and "--master-port" not in argv  # torchrun's rendezvous picks a free port
