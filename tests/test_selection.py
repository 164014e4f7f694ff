"""How a run is chosen (in-process): explicit choices, detection by priority, strategies never
by surprise, refusals, the launcher's hand-over, and Accelerate's variable names as aliases."""

from __future__ import annotations

import argparse
import warnings

import pytest
from fake_plugins import fake_plugin
from local_devices import local_accelerator, local_device_count

from drivetrain import environment
from drivetrain.cli import launch_cmd
from drivetrain.cluster import ClusterEnvironment
from drivetrain.errors import ConfigError, IncompatibleChoiceError, PluginSelectionError, PluginWarning
from drivetrain.plugin_api import PlatformSpec, PluginInfo, Probe, StrategySpec, hookimpl
from importlib import metadata as importlib_metadata
from drivetrain.plugin_manager import PluginManager
from drivetrain.selection.choice import (
    Requests,
    choose_cluster,
    platform_for_distributed_type,
    requests_from_env,
    select,
    strategy_for_distributed_type,
)

INFO = PluginInfo(api_version="2.0")
ONE = ClusterEnvironment(name="test", world_size=1)
TWO = ClusterEnvironment(name="test", world_size=2)


def built_ins():
    return list(importlib_metadata.entry_points(group="drivetrain.plugins"))


def manager_with(*fakes, env=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PluginManager(env=env or {}, entry_points=[*built_ins(), *fakes]).load()


def npu_plugin(priority=500, available=True):
    @hookimpl
    def drivetrain_register_platforms():
        return [PlatformSpec(name="npu", factory="drivetrain.platform:Platform", priority=priority,
                             probe=lambda: Probe(available, "an NPU" if available else "no NPU here"),
                             multi_process_type="MULTI_NPU", precisions=("bf16",),
                             communication="torch_distributed")]

    return fake_plugin("npu", PLUGIN_INFO=INFO, drivetrain_register_platforms=drivetrain_register_platforms)


def sharding_plugin():
    @hookimpl
    def drivetrain_register_strategies():
        return [StrategySpec(name="shard", distributed_type="SHARD", platforms=("npu",), precisions=("bf16",))]

    return fake_plugin("shard", PLUGIN_INFO=INFO, drivetrain_register_strategies=drivetrain_register_strategies)


def test_detection_picks_the_highest_priority_usable_platform():
    manager = manager_with()
    assert select(manager, Requests(), cluster=ONE).platform.name == local_accelerator()
    third_party = manager_with(npu_plugin(priority=500))
    selection = select(third_party, Requests(), cluster=TWO)
    assert selection.platform.name == "npu" and selection.reasons["platform"].startswith("detected (priority 500)")
    assert selection.distributed_type == "MULTI_NPU"  # a third-party platform reports its own name
    assert select(manager_with(npu_plugin(available=False)), Requests(), cluster=ONE).platform.name \
        == local_accelerator()


def test_explicit_choice_wins_and_unknown_names_list_the_installed_ones():
    manager = manager_with(npu_plugin(priority=500))
    assert select(manager, Requests(cpu=True), cluster=ONE).platform.name == "cpu"
    assert select(manager, Requests(platform="cpu"), cluster=ONE).reasons["platform"] == "requested"
    with pytest.raises(PluginSelectionError, match=r"unknown platform 'tpu'; installed platforms: .*cpu, cuda, .*npu"):
        select(manager, Requests(platform="tpu"), cluster=ONE)
    with pytest.raises(PluginSelectionError, match="unknown strategy 'zero'"):
        select(manager, Requests(strategy="zero"), cluster=TWO)
    with pytest.raises(PluginSelectionError, match="unknown mixed precision 'fp4'"):
        select(manager, Requests(mixed_precision="fp4"), cluster=ONE)


def test_unusable_platforms_are_refused_with_the_reason():
    manager = manager_with(npu_plugin(available=False))
    with pytest.raises(PluginSelectionError, match=r"platform 'npu' was requested but is not usable here: no NPU here"):
        select(manager, Requests(platform="npu"), cluster=ONE)
    if local_accelerator() != "cuda":  # a built-in's probe gives its own reason
        with pytest.raises(PluginSelectionError, match=r"platform 'cuda' was requested but is not usable here: .*CUDA"):
            select(manager, Requests(platform="cuda"), cluster=ONE)
    with pytest.raises(PluginSelectionError, match=r"xla.*pip install 'drivetrain\[xla\]'"):
        select(manager, Requests(platform="xla"), cluster=ONE)


def test_strategies_are_never_picked_by_surprise():
    manager = manager_with(npu_plugin(), sharding_plugin())
    assert select(manager, Requests(), cluster=ONE).strategy is None
    several = select(manager, Requests(), cluster=TWO)
    assert several.strategy.name == "ddp" and several.distributed_type == "MULTI_NPU"  # automatic, not "shard"
    asked = select(manager, Requests(strategy="shard", mixed_precision="bf16"), cluster=TWO)
    assert asked.strategy.name == "shard" and asked.distributed_type == "SHARD"
    assert select(manager, Requests(strategy="none"), cluster=TWO).strategy is None


def test_incompatible_combinations_fail_before_training():
    manager = manager_with(npu_plugin(), sharding_plugin())
    with pytest.raises(IncompatibleChoiceError, match="strategy 'shard' does not run on platform 'cpu'"):
        select(manager, Requests(cpu=True, strategy="shard"), cluster=TWO)
    with pytest.raises(IncompatibleChoiceError, match="'fp16' is not supported by platform 'npu'"):
        select(manager, Requests(mixed_precision="fp16"), cluster=ONE)


def test_distributed_types_of_config_files_map_to_plugins():
    manager = manager_with(npu_plugin(), sharding_plugin())
    assert platform_for_distributed_type(manager, "MULTI_GPU") == "cuda"
    assert platform_for_distributed_type(manager, "multi_cpu") == "cpu"
    assert platform_for_distributed_type(manager, "XLA") == "xla"
    assert platform_for_distributed_type(manager, "NO") is None
    assert strategy_for_distributed_type(manager, "SHARD") == "shard"
    assert strategy_for_distributed_type(manager, "MULTI_GPU") is None


def test_environment_variables_and_their_accelerate_aliases():
    manager = manager_with(sharding_plugin())
    env = {"ACCELERATE_MIXED_PRECISION": "BF16", "ACCELERATE_USE_CPU": "true", "ACCELERATE_USE_SHARD": "1"}
    requests = requests_from_env(manager, env)
    assert (requests.mixed_precision, requests.cpu, requests.strategy) == ("BF16", True, "shard")
    same = {"DRIVETRAIN_USE_CPU": "1", "ACCELERATE_USE_CPU": "true", "DRIVETRAIN_MIXED_PRECISION": "bf16",
            "ACCELERATE_MIXED_PRECISION": "BF16"}
    assert requests_from_env(manager, same).cpu is True  # two spellings of one value are no conflict
    with pytest.raises(ConfigError, match="DRIVETRAIN_MIXED_PRECISION='fp16' and ACCELERATE_MIXED_PRECISION='bf16'"):
        requests_from_env(manager, {"DRIVETRAIN_MIXED_PRECISION": "fp16", "ACCELERATE_MIXED_PRECISION": "bf16"})
    with pytest.raises(ConfigError, match="DRIVETRAIN_DEBUG_MODE='0' and ACCELERATE_DEBUG_MODE='yes'"):
        environment.read_bool("DEBUG_MODE", env={"DRIVETRAIN_DEBUG_MODE": "0", "ACCELERATE_DEBUG_MODE": "yes"})
    assert environment.read_int("GRADIENT_ACCUMULATION_STEPS", env={"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4"}) == 4
    assert environment.read_pair("DRIVETRAIN_FSDP_OFFLOAD_PARAMS", "FSDP_OFFLOAD_PARAMS",
                                 env={"FSDP_OFFLOAD_PARAMS": "true"}) == "true"
    with pytest.raises(ConfigError, match="FSDP_OFFLOAD_PARAMS"):
        environment.read_pair("DRIVETRAIN_FSDP_OFFLOAD_PARAMS", "FSDP_OFFLOAD_PARAMS", meaning=environment.parse_bool,
                              env={"FSDP_OFFLOAD_PARAMS": "true", "DRIVETRAIN_FSDP_OFFLOAD_PARAMS": "false"})
    assert environment.own_name("ACCELERATE_USE_FSDP") == "DRIVETRAIN_USE_FSDP"
    assert environment.own_name("FSDP_SHARDING_STRATEGY") == "DRIVETRAIN_FSDP_SHARDING_STRATEGY"


@pytest.mark.parametrize("env, expected", [
    ({"TORCHELASTIC_RUN_ID": "x", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
      "MASTER_ADDR": "h", "MASTER_PORT": "1234", "GROUP_RANK": "1"}, ("torchelastic", 4, 3, 1, 1, 2)),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
      "SLURM_JOB_ID": "42", "SLURM_STEP_NODELIST": "gpu[07-08]"}, ("slurm", 8, 5, 1, 1, 2)),
    ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "n0"}, ("mpi", 4, 2, 0, 1, 2)),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "MASTER_ADDR": "n0"},
     ("mpi", 2, 1, 1, 0, 1)),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "RANK": "1", "WORLD_SIZE": "3", "MASTER_ADDR": "job-master-0"},
     ("kubernetes", 3, 1, 0, 1, 3)),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}, ("env", 2, 0, 0, 0, 1)),
    ({}, ("single-process", 1, 0, 0, 0, 1)),
])
def test_cluster_environments_are_detected_from_their_variables(monkeypatch, env, expected):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cluster, _plugin, _reason = choose_cluster(manager_with())
    assert (cluster.name, cluster.world_size, cluster.rank, cluster.local_rank, cluster.node_rank,
            cluster.num_nodes) == expected
    if expected[0] == "slurm":
        assert cluster.master_addr == "gpu07"


def test_a_cluster_environment_can_be_requested_by_name(monkeypatch):
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    manager = manager_with()
    assert choose_cluster(manager, env={"DRIVETRAIN_CLUSTER_ENVIRONMENT": "none"})[0].world_size == 1
    assert choose_cluster(manager, env={"DRIVETRAIN_CLUSTER_ENVIRONMENT": "slurm"})[1] == "slurm"
    with pytest.raises(PluginSelectionError, match="'mpi' was requested but this process was not started by it"):
        choose_cluster(manager, env={"DRIVETRAIN_CLUSTER_ENVIRONMENT": "mpi"})


def launch_args(*argv):
    parser = launch_cmd.build_parser()
    args = parser.parse_args([*argv, "script.py"])
    launch_cmd.merge_config(args, parser)
    return args


def test_the_launcher_hands_its_choice_to_every_child(monkeypatch, tmp_path):
    for key in ("DRIVETRAIN_MIXED_PRECISION", "ACCELERATE_MIXED_PRECISION", "DRIVETRAIN_CONFIG_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    args = launch_args("--cpu", "--num_processes", "2", "--mixed-precision", "bf16", "--timeout", "7")
    launch_cmd._defaults(args)
    launch_cmd.resolve_choice(args, __import__("drivetrain").get_plugin_manager())
    env = launch_cmd.child_environment(args)
    assert env["DRIVETRAIN_PLATFORM"] == env["ACCELERATE_PLATFORM"] == "cpu"
    assert env["DRIVETRAIN_STRATEGY"] == "ddp" and env["DRIVETRAIN_MIXED_PRECISION"] == "bf16"
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16" and env["DRIVETRAIN_USE_CPU"] == "1"
    assert env["DRIVETRAIN_TIMEOUT"] == "7.0"


def test_launch_option_precedence_is_command_line_then_variables_then_config(monkeypatch, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("distributed_type: MULTI_CPU\nnum_processes: 4\nmixed_precision: fp16\nuse_cpu: true\n"
                      "gradient_accumulation_steps: 2\n")
    manager = __import__("drivetrain").get_plugin_manager()
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    monkeypatch.delenv("DRIVETRAIN_MIXED_PRECISION", raising=False)
    args = launch_args("--config-file", str(config))
    assert (args.num_processes, args.gradient_accumulation_steps) == (4, 2)
    assert launch_cmd.requests_for(args, manager).mixed_precision == "fp16"  # from the file
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert launch_cmd.requests_for(args, manager).mixed_precision == "bf16"  # a variable beats the file
    args = launch_args("--config-file", str(config), "--mixed_precision", "no", "--num-processes", "2")
    assert launch_cmd.requests_for(args, manager).mixed_precision == "no"  # the command line beats both
    assert args.num_processes == 2


def test_plugins_add_their_own_launch_options_and_fill_them_from_the_config(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: '0,1'\n")
    args = launch_args("--config-file", str(config))
    assert args.gpu_ids == "0,1" and args.platform is None
    gpus = __import__("drivetrain_cuda.plugin").plugin.probe().available
    # Without a usable GPU, the MULTI_GPU file and --multi_gpu start CPU processes (with a
    # warning), as Accelerate does.
    assert launch_cmd.requests_for(args, __import__("drivetrain").get_plugin_manager()).platform == (
        "cuda" if gpus else None)
    assert launch_args("--multi_gpu").platform == ("cuda" if gpus else None)
    assert launch_args("--gpu-ids", "3").gpu_ids == "3"


def test_a_multi_gpu_file_without_a_usable_gpu_runs_cpu_processes(tmp_path, caplog, monkeypatch):
    """The platform a ``distributed_type`` only implies gives way to detection where it cannot
    run (transformers' CPU harness launches a ``MULTI_GPU`` file); one named by ``platform:``
    is still refused."""
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)  # a CPU-only torch, on any machine
    manager = __import__("drivetrain").get_plugin_manager()
    config = tmp_path / "c.yaml"
    config.write_text("distributed_type: MULTI_GPU\nnum_processes: 2\n")
    args = launch_args("--config-file", str(config))
    with caplog.at_level("WARNING"):
        requests = launch_cmd.requests_for(args, manager)
    assert requests.platform is None and "implies platform 'cuda'" in caplog.text
    selection = launch_cmd.resolve_choice(args, manager, requests)
    assert (selection.platform.name, selection.distributed_type) == ("cpu", "MULTI_CPU")
    config.write_text("distributed_type: MULTI_GPU\nplatform: cuda\nnum_processes: 2\n")
    with pytest.raises(PluginSelectionError, match="platform 'cuda' was requested but is not usable here"):
        launch_cmd.resolve_choice(launch_args("--config-file", str(config)), manager)


def test_a_plugin_whose_launch_options_clash_is_left_out(capsys):
    @hookimpl
    def drivetrain_add_launch_arguments(parser):
        parser.add_argument("--cpu")  # already the core's

    manager = manager_with(fake_plugin("clash", PLUGIN_INFO=INFO,
                                       drivetrain_add_launch_arguments=drivetrain_add_launch_arguments))
    parser = launch_cmd.LaunchParser(prog="x")
    launch_cmd._configure(parser)
    launch_cmd._add_plugin_arguments(parser, manager)
    assert "plugin 'clash' could not add its launch options" in capsys.readouterr().err
    assert parser.parse_args(["--num_processes", "3", "s.py", "--cpu"]).training_script_args == ["--cpu"]


def test_underscore_spellings_and_script_arguments_pass_through():
    args = launch_args("--num_processes", "2", "--main_process_port", "1234", "--max_restarts", "1",
                       "--monitor_interval", "2", "--rdzv_backend", "c10d", "-m")
    assert (args.num_processes, args.main_process_port, args.max_restarts, args.monitor_interval,
            args.rdzv_backend, args.module) == (2, 1234, 1, 2.0, "c10d", True)
    parser = launch_cmd.build_parser()
    args = parser.parse_args(["--cpu", "train.py", "--lr", "1", "--cpu", "--help"])
    assert args.training_script == "train.py" and args.training_script_args == ["--lr", "1", "--cpu", "--help"]


def test_torchrun_command_line_follows_the_options():
    from drivetrain_torchrun.launcher import torchrun_arguments

    args = argparse.Namespace(num_machines=2, nproc_per_node=4, max_restarts=0, monitor_interval=0.1, tee="0",
                              log_dir=None, rdzv_conf=None, main_process_port=29501, main_process_ip="10.0.0.1",
                              rdzv_backend="c10d", machine_rank=1, no_python=False, module=True,
                              training_script="pkg.train", training_script_args=["--x"], role=None)
    argv = torchrun_arguments(args)
    assert argv[argv.index("--rdzv-endpoint") + 1] == "10.0.0.1:29501" and "--standalone" not in argv
    assert argv[-5:] == ["-m", "drivetrain.cli.child", "--module", "pkg.train", "--x"]
    args.num_machines, args.main_process_port, args.rdzv_backend = 1, None, "static"
    assert "--standalone" in torchrun_arguments(args)


def test_several_processes_without_a_collective_backend_stop_before_training():
    blocked = manager_with(env={"DRIVETRAIN_BLOCK_PLUGINS": "torch_distributed"})
    assert select(blocked, Requests(), cluster=ONE).platform.name == local_accelerator()  # one process needs none
    with pytest.raises(PluginSelectionError) as caught:
        select(blocked, Requests(), cluster=TWO)
    message = str(caught.value)
    assert f"2 processes on platform '{local_accelerator()}' need plugin 'torch_distributed'" in message
    assert "blocked by DRIVETRAIN_BLOCK_PLUGINS: remove 'torch_distributed'" in message

    @hookimpl
    def drivetrain_register_platforms():
        return [PlatformSpec(name="lonely", factory="drivetrain.platform:Platform", priority=900)]

    lonely = manager_with(fake_plugin("lonely", PLUGIN_INFO=INFO, drivetrain_register_platforms=drivetrain_register_platforms))
    with pytest.raises(PluginSelectionError, match="offers no collectives"):
        select(lonely, Requests(), cluster=TWO)


def test_a_run_whose_collectives_are_missing_raises_instead_of_going_local():
    from drivetrain.errors import DistributedError
    from drivetrain.run import Run

    manager = manager_with()
    selection = select(manager, Requests(), cluster=TWO)
    run = Run(manager, selection, platform=None)  # no process group: torch_distributed answers None
    with pytest.raises(DistributedError, match="2 processes but no active plugin provides collectives"):
        run.collectives  # noqa: B018


@pytest.mark.parametrize("blocked, requests, expected", [
    ("native_amp", Requests(mixed_precision="bf16"),
     "mixed precision 'bf16': DRIVETRAIN_BLOCK_PLUGINS blocks native_amp, which may provide it"),
    ("cpu", Requests(cpu=True), "plugin 'cpu' provides it and is blocked by DRIVETRAIN_BLOCK_PLUGINS: remove 'cpu'"),
    ("cpu,cuda", Requests(), "no platform is usable; DRIVETRAIN_BLOCK_PLUGINS blocks cpu, cuda"),
])
def test_blocking_a_plugin_the_run_needs_says_so(blocked, requests, expected):
    manager = manager_with(env={"DRIVETRAIN_BLOCK_PLUGINS": blocked})
    with pytest.raises(PluginSelectionError) as caught:
        select(manager, requests, cluster=ONE)
    assert expected in str(caught.value)
    assert "installed mixed precisions: none" not in str(caught.value)


def test_a_platform_whose_factory_cannot_be_imported_is_named_at_launch():
    @hookimpl
    def drivetrain_register_platforms():
        return [PlatformSpec(name="npu", factory="no_such_npu_module:Platform", priority=500,
                             probe=lambda: Probe(True, "an NPU"), multi_process_type="MULTI_NPU",
                             communication="torch_distributed")]

    manager = manager_with(fake_plugin("npu", PLUGIN_INFO=INFO, drivetrain_register_platforms=drivetrain_register_platforms))
    args = launch_args()
    # Detected, it is skipped with the reason: the next platform (this machine's) runs the job.
    with pytest.warns(PluginWarning, match=rf"'{local_accelerator()}' runs instead: platform 'npu' of plugin 'npu' "
                                           r".*no_such_npu_module.*pip install -U someone-else"):
        assert launch_cmd._default_num_processes(args, manager, launch_cmd.requests_for(args, manager)) \
            == local_device_count()
    # Named by the user, it is an error that says the same.
    args = launch_args("--platform", "npu")
    with pytest.raises(PluginSelectionError, match=r"platform 'npu' of plugin 'npu' .*no_such_npu_module.*"
                                                   r"pip install -U someone-else"):
        launch_cmd._default_num_processes(args, manager, launch_cmd.requests_for(args, manager))


def test_a_precision_no_backend_here_can_provide_is_refused_with_the_extra_to_install(monkeypatch):
    """fp8 asked on the CPU without torchao: refused before anything runs, naming the extra that
    provides it here, not the backends that would need a GPU."""
    from drivetrain import get_plugin_manager
    from drivetrain_torchao import capability

    monkeypatch.setattr(capability, "is_torchao_available", lambda: False)
    with pytest.raises(IncompatibleChoiceError) as info:
        select(get_plugin_manager(), Requests(cpu=True, mixed_precision="fp8"), cluster=ONE)
    message = str(info.value)
    assert message.startswith("mixed precision 'fp8' cannot run on platform 'cpu': ao: ") \
        and "pip install 'drivetrain[torchao]'" in message, message
    assert "drivetrain[te]" not in message and "backends for other platforms only: te (cuda), msamp (cuda)" \
        in message, message


def test_a_layer_module_imports_first_in_a_fresh_process():
    # drivetrain.utils.versions reaches drivetrain.selection before anything loaded its choice
    # module; the package's lazy names must not recurse then.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import drivetrain.utils.versions as v; v.is_torch_version"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
