"""The xpu platform plugin: contract tests that run everywhere, real tests on an Intel GPU.

The contract tests fake ``torch.xpu`` with monkeypatch (torch answers as on a machine with
two Intel GPUs), so the plugin's answers, its collective backend choice and its place in
detection are checked on any machine. Those marked ``xpu`` need an Intel GPU and are
skipped with the reason elsewhere.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from drivetrain.cluster import ClusterEnvironment
from drivetrain.errors import DistributedError
from drivetrain.plugin_api import resolve
from drivetrain.plugin_manager import get_plugin_manager
from drivetrain.selection.choice import Requests, select

HAS_XPU = hasattr(torch, "xpu") and torch.xpu.is_available()
NO_XPU_REASON = f"no Intel GPU visible to torch {torch.__version__}"


def spec():
    return next(s for _p, s in get_plugin_manager().registrations("drivetrain_register_platforms") if s.name == "xpu")


@pytest.fixture
def fake_xpu(monkeypatch):
    """torch.xpu answers as with two Intel GPUs; the calls that change state are recorded."""
    calls = []
    xpu = torch.xpu
    monkeypatch.setattr(xpu, "is_available", lambda: True)
    monkeypatch.setattr(xpu, "device_count", lambda: 2)
    monkeypatch.setattr(xpu, "set_device", lambda device: calls.append(("device", str(device))))
    monkeypatch.setattr(xpu, "manual_seed_all", lambda seed: calls.append(("seed", seed)))
    monkeypatch.setattr(xpu, "get_rng_state", lambda: torch.tensor([3, 4], dtype=torch.uint8))
    monkeypatch.setattr(xpu, "set_rng_state", lambda state: calls.append(("state", state.tolist())))
    monkeypatch.setattr(xpu, "mem_get_info", lambda index: ((10 + index) * 2**30, 64 * 2**30))
    monkeypatch.setattr(xpu, "memory_allocated", lambda: 123)
    monkeypatch.setattr(xpu, "is_bf16_supported", lambda: True)
    return calls


def test_spec_describes_the_platform():
    xpu = spec()
    assert (xpu.priority, xpu.multi_process_type, xpu.communication) == (90, "MULTI_XPU", "torch_distributed")
    assert set(xpu.precisions) == {"fp16", "bf16"}
    assert xpu.factory == "drivetrain_xpu.platform:XpuPlatform"


def test_probe_says_why_without_a_device():
    if HAS_XPU:
        pytest.skip("an Intel GPU is present")
    answer = spec().probe()
    assert not answer.available and "Intel GPU" in answer.reason


def test_detected_selected_by_name_and_multi_xpu_with_several_processes(fake_xpu):
    from drivetrain import DistributedType

    manager = get_plugin_manager()
    assert spec().probe().available and "2 Intel GPU" in spec().probe().reason
    if not torch.cuda.is_available():
        assert select(manager, Requests(), cluster=ClusterEnvironment("t")).platform.name == "xpu"
    two = select(manager, Requests(platform="xpu"), cluster=ClusterEnvironment("t", world_size=2))
    assert two.distributed_type == DistributedType.MULTI_XPU == "MULTI_XPU" and two.strategy.name == "ddp"
    assert select(manager, Requests(cpu=True), cluster=ClusterEnvironment("t")).platform.name == "cpu"


def test_the_platform_reaches_the_device_through_torch_xpu(fake_xpu):
    platform = resolve(spec().factory)()
    assert [platform.device_for(i) for i in range(3)] == [torch.device("xpu", 0), torch.device("xpu", 1),
                                                          torch.device("xpu", 0)]
    platform.set_device(torch.device("xpu", 1))
    platform.manual_seed_all(5)
    assert platform.get_rng_state().tolist() == [3, 4]
    platform.set_rng_state(torch.tensor([9], dtype=torch.uint8))
    assert fake_xpu == [("device", "xpu:1"), ("seed", 5), ("state", [9])]
    assert platform.free_memory(1) == 11 * 2**30 and platform.memory_allocated() == 123
    assert platform.supports_autocast(torch.bfloat16) and platform.supports_autocast(torch.float16)


def test_the_collective_backend_is_xccl_or_oneccls(monkeypatch, tmp_path):
    from drivetrain_xpu import backend

    platform = resolve(spec().factory)()
    monkeypatch.setattr(backend, "is_torch_version", lambda operation, version: True)
    monkeypatch.setattr(dist, "is_xccl_available", lambda: True, raising=False)
    assert platform.default_backend == "xccl"
    monkeypatch.setattr(dist, "is_xccl_available", lambda: False, raising=False)
    with pytest.raises(DistributedError, match="oneccl_bind_pt"):
        platform.default_backend
    # oneCCL's bindings register "ccl" when imported: a real module on the path stands in
    (tmp_path / "oneccl_bindings_for_pytorch.py").write_text("IMPORTED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "oneccl_bindings_for_pytorch", raising=False)
    assert platform.default_backend == "ccl" and sys.modules["oneccl_bindings_for_pytorch"].IMPORTED


def test_accelerates_names_are_real(fake_xpu, monkeypatch):
    from drivetrain import utils

    assert utils.is_xpu_available() is True
    assert utils.XPU_PROFILING_AVAILABLE_PYTORCH_VERSION == "2.4.0"
    from drivetrain_xpu import backend

    monkeypatch.setattr(dist, "is_xccl_available", lambda: True, raising=False)
    monkeypatch.setattr(backend, "is_torch_version", lambda operation, version: False)
    assert utils.is_xccl_available() is False  # torch older than 2.8 has no XCCL, whatever it says
    monkeypatch.setattr(backend, "is_torch_version", lambda operation, version: True)
    assert utils.is_xccl_available() is True
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    assert utils.is_xpu_available() is False


def test_use_xpu_selects_the_platform(fake_xpu):
    from drivetrain.cli.launch_cmd import build_parser
    from drivetrain.selection.choice import requests_from_env

    assert build_parser().parse_args(["--use_xpu", "script.py"]).platform == "xpu"
    assert requests_from_env(get_plugin_manager(), {"ACCELERATE_USE_XPU": "1"}).platform == "xpu"


def test_discovery_does_not_import_torch():
    code = "import sys, drivetrain_xpu.plugin; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.xpu
@pytest.mark.skipif(not HAS_XPU, reason=NO_XPU_REASON)
def test_training_on_an_intel_gpu_for_real(fresh_state):
    from device_training import seeded_draws_repeat, train_linear

    from drivetrain import Accelerator

    accelerator = Accelerator(mixed_precision="bf16")
    assert accelerator.device.type == "xpu"
    assert seeded_draws_repeat(accelerator)  # set_seed reaches the XPU generators
    losses = train_linear(accelerator)
    assert losses[-1] < losses[0] / 10
    assert accelerator.state.platform.free_memory(0) > 0
