"""The cuda platform plugin: contract tests that run everywhere, and real tests where a GPU is.

The contract tests hold on any machine (the probe answers and says why; selection refuses
the platform where it cannot run). Those marked ``cuda`` need a GPU and are skipped with the
reason elsewhere.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import torch
from conftest import clean_environ

from drivetrain.config import config_from_dict
from drivetrain.plugin_api import resolve
from drivetrain.plugin_manager import get_plugin_manager
from drivetrain.selection.choice import Requests, select
from drivetrain.cluster import ClusterEnvironment

HAS_GPU = torch.cuda.is_available()
NO_GPU_REASON = ("no CUDA device here" if torch.version.cuda else
                 f"torch {torch.__version__} is built without CUDA")


def spec():
    return next(s for p, s in get_plugin_manager().registrations("drivetrain_register_platforms") if s.name == "cuda")


def test_spec_describes_the_platform():
    cuda = spec()
    assert (cuda.priority, cuda.multi_process_type, cuda.single_process_type, cuda.communication) == (
        100, "MULTI_GPU", "NO", "torch_distributed")
    assert {"fp16", "bf16"} <= set(cuda.precisions)
    assert cuda.factory == "drivetrain_cuda.platform:CudaPlatform"
    assert resolve(cuda.factory).default_backend == "nccl"


def test_probe_answers_with_a_reason():
    answer = spec().probe()
    assert answer.available is HAS_GPU and "CUDA" in answer.reason


def test_discovery_does_not_import_torch():
    code = "import sys, drivetrain_cuda.plugin; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present: the platform is usable here")
def test_selection_refuses_cuda_where_it_cannot_run(tmp_path):
    from drivetrain.errors import PluginSelectionError

    with pytest.raises(PluginSelectionError, match=r"platform 'cuda' was requested but is not usable here: .*CUDA"):
        select(get_plugin_manager(), Requests(platform="cuda"), cluster=ClusterEnvironment("t"))
    assert select(get_plugin_manager(), Requests(), cluster=ClusterEnvironment("t")).platform.name != "cuda"
    env = clean_environ()
    (tmp_path / "script.py").write_text("print('never runs')\n")
    # (--multi_gpu, unlike --platform cuda, falls back to CPU processes here, as Accelerate's does)
    result = subprocess.run([sys.executable, "-m", "drivetrain", "launch", "--platform", "cuda", "script.py"],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 2 and "platform 'cuda' was requested but is not usable here" in result.stderr
    with pytest.raises(RuntimeError, match="no CUDA device is visible"):
        resolve(spec().factory)().device_for(0)


def test_launch_options_become_the_childrens_environment():
    from drivetrain_cuda import plugin

    def args(**values):
        return argparse.Namespace(**{"cpu": None, "gpu_ids": None, "enable_cpu_affinity": None, **values})

    assert plugin.drivetrain_launch_environment(args(gpu_ids="0, 2")) == {"CUDA_VISIBLE_DEVICES": "0,2"}
    assert plugin.drivetrain_launch_environment(args(gpu_ids="all")) == {}
    assert plugin.drivetrain_launch_environment(args(gpu_ids="1", cpu=True)) is None
    assert plugin.drivetrain_launch_environment(args(enable_cpu_affinity=True)) == {"DRIVETRAIN_CPU_AFFINITY": "1"}


def test_config_keys_and_env_report():
    from drivetrain_cuda import plugin
    from drivetrain_cuda.platform import _parse_cpu_list

    config = config_from_dict({"gpu_ids": "0,1", "enable_cpu_affinity": True})
    assert config.get("gpu_ids") == "0,1" and config.get("enable_cpu_affinity") is True
    lines = {line.key: line.value for line in plugin.drivetrain_env_report()}
    assert lines["CUDA (torch build)"] == str(torch.version.cuda or "none")
    assert int(lines["CUDA devices"]) == (torch.cuda.device_count() if HAS_GPU else 0)
    assert _parse_cpu_list("0-3,8-9\n") == {0, 1, 2, 3, 8, 9}


# ------------------------------------------------------------------ on a GPU


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU_REASON)
@pytest.mark.parametrize("local_rank", [0, 1, 5])
def test_device_follows_the_local_rank(local_rank):
    platform = resolve(spec().factory)()
    assert platform.device_for(local_rank) == torch.device("cuda", local_rank % torch.cuda.device_count())


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU_REASON)
def test_platform_operations_on_a_gpu():
    platform = resolve(spec().factory)()
    device = platform.device_for(0)
    platform.set_device(device)
    assert torch.cuda.current_device() == device.index
    tensor = torch.ones(1024, 1024, device=device)
    platform.synchronize()
    assert platform.memory_allocated() >= tensor.numel() * 4
    platform.manual_seed_all(7)
    state = platform.get_rng_state()
    first = torch.rand(3, device=device)
    platform.set_rng_state(state)
    assert torch.equal(first, torch.rand(3, device=device))
    del tensor
    platform.empty_cache()
    assert platform.supports_autocast(torch.float16)
    assert spec().probe().available and spec().probe().details["device_count"] >= 1


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU_REASON)
def test_partial_state_picks_the_gpu(monkeypatch):
    from drivetrain import AcceleratorState, DistributedType, PartialState

    for key in ("RANK", "WORLD_SIZE", "DRIVETRAIN_PLATFORM", "DRIVETRAIN_USE_CPU", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(key, raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        state = PartialState()
        assert state.device == torch.device("cuda", 0) and state.distributed_type == DistributedType.NO
        assert state.run.selection.platform.name == "cuda"
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    lines = {line.key: line.value for line in __import__("drivetrain_cuda.plugin").plugin.drivetrain_env_report()}
    assert torch.cuda.get_device_name(0) in lines["GPU 0"]


@pytest.mark.cuda
@pytest.mark.multiprocess
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_processes_on_two_gpus_talk_over_nccl():
    import json

    from launching import SCRIPTS

    env = clean_environ()
    result = subprocess.run([sys.executable, "-m", "drivetrain", "launch", "--multi_gpu", "--num_processes", "2",
                             str(SCRIPTS / "check_cluster.py")], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    views = [json.loads(line.split(" ", 1)[1]) for line in result.stdout.splitlines() if line.startswith("CLUSTER ")]
    assert {v["distributed_type"] for v in views} == {"MULTI_GPU"} and {v["platform"] for v in views} == {"cuda"}
    assert [v["sum"] for v in views] == [3.0, 3.0]
