"""The mps platform plugin: contract tests that run everywhere, real tests on a Mac.

The contract tests fake ``torch.backends.mps`` (and the ``torch.mps`` calls the platform
makes) with monkeypatch, so the plugin's answers, its refusal of several processes and its
place in detection are checked on any machine. Those marked ``mps`` need Apple silicon and
are skipped with the reason elsewhere.
"""

from __future__ import annotations

import platform as host
import subprocess
import sys

import pytest
import torch

from drivetrain.cluster import ClusterEnvironment
from drivetrain.errors import IncompatibleChoiceError, PluginSelectionError
from drivetrain.plugin_api import resolve
from drivetrain.plugin_manager import get_plugin_manager
from drivetrain.selection.choice import Requests, select

HAS_MPS = torch.backends.mps.is_available()
NO_MPS_REASON = "no Apple silicon GPU (MPS) here"


def spec():
    return next(s for _p, s in get_plugin_manager().registrations("drivetrain_register_platforms") if s.name == "mps")


@pytest.fixture
def fake_mac(monkeypatch):
    """torch answers as on a Mac with MPS (macOS 14.5), the device calls recorded."""
    calls = []
    from drivetrain_mps import support

    monkeypatch.setattr(support, "ON_MACOS", True)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(host, "mac_ver", lambda: ("14.5", ("", "", ""), "arm64"))
    monkeypatch.setattr(torch.mps, "manual_seed", lambda seed: calls.append(("seed", seed)))
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda: torch.tensor([7, 8], dtype=torch.uint8))
    monkeypatch.setattr(torch.mps, "set_rng_state", lambda state: calls.append(("state", state.tolist())))
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 16 * 2**30)
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: 2**30)
    return calls


def test_spec_describes_a_single_process_platform():
    mps = spec()
    assert (mps.name, mps.priority, mps.communication) == ("mps", 50, None)
    assert 0 < mps.priority < 100  # above the CPU, below CUDA
    assert mps.factory == "drivetrain_mps.platform:MpsPlatform"
    assert resolve(mps.factory).device_type == "mps"


def test_probe_says_why_it_is_not_usable_without_mps(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: False)
    answer = spec().probe()
    assert not answer.available and "no MPS support" in answer.reason
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    answer = spec().probe()
    assert not answer.available and "macOS 12.3" in answer.reason


def test_on_a_mac_mps_is_detected_above_the_cpu_and_selected_by_name(fake_mac):
    answer = spec().probe()
    assert answer.available and "macOS 14.5" in answer.reason
    one = ClusterEnvironment("t")
    detected = select(get_plugin_manager(), Requests(), cluster=one)
    if not torch.cuda.is_available():
        assert detected.platform.name == "mps" and detected.distributed_type == "NO"
    assert select(get_plugin_manager(), Requests(platform="mps"), cluster=one).platform.name == "mps"
    assert select(get_plugin_manager(), Requests(cpu=True), cluster=one).platform.name == "cpu"


def test_several_processes_are_refused_before_they_start_with_the_fix(fake_mac):
    with pytest.raises(PluginSelectionError) as refused:
        select(get_plugin_manager(), Requests(platform="mps"), cluster=ClusterEnvironment("t", world_size=2))
    message = str(refused.value)
    assert "\n" not in message and "platform 'mps'" in message
    assert "run one process or choose another platform" in message


def test_the_platform_reaches_the_device_through_torch_mps(fake_mac):
    platform = resolve(spec().factory)()
    assert platform.device_for(0) == torch.device("mps") and platform.device_count() == 1
    platform.manual_seed_all(11)
    assert platform.get_rng_state().tolist() == [7, 8]
    platform.set_rng_state(torch.tensor([1, 2], dtype=torch.uint8))
    assert fake_mac == [("seed", 11), ("state", [1, 2])]
    assert platform.free_memory(0) == 15 * 2**30 and platform.memory_allocated() == 2**30
    assert platform.supports_autocast(torch.float16) and platform.supports_autocast(torch.bfloat16)


def test_bf16_needs_macos_14(monkeypatch, fake_mac):
    from drivetrain_mps import plugin

    monkeypatch.setattr(host, "mac_ver", lambda: ("13.6", ("", "", ""), "arm64"))
    older = plugin.drivetrain_register_platforms()[0]
    assert tuple(older.precisions) == ("fp16",)
    assert not resolve(older.factory)().supports_autocast(torch.bfloat16)
    manager = get_plugin_manager()
    monkeypatch.setattr(manager, "registrations", _with_platform(manager.registrations, older))
    with pytest.raises(IncompatibleChoiceError, match="'bf16' is not supported by platform 'mps'"):
        select(manager, Requests(platform="mps", mixed_precision="bf16"), cluster=ClusterEnvironment("t"))
    monkeypatch.setattr(host, "mac_ver", lambda: ("14.0", ("", "", ""), "arm64"))
    assert tuple(plugin.drivetrain_register_platforms()[0].precisions) == ("fp16", "bf16")


def _with_platform(registrations, replacement):
    def patched(hook, *args, **kwargs):
        found = registrations(hook, *args, **kwargs)
        if hook != "drivetrain_register_platforms":
            return found
        return [(p, replacement if s.name == replacement.name else s) for p, s in found]

    return patched


def test_is_mps_available_is_the_plugins_real_probe(fake_mac):
    from drivetrain.utils import is_mps_available

    assert is_mps_available() is True
    assert is_mps_available(min_version="99.0") is False


def test_accelerates_variable_and_option_select_mps(fake_mac):
    from drivetrain.selection.choice import requests_from_env

    assert requests_from_env(get_plugin_manager(), {"ACCELERATE_USE_MPS_DEVICE": "true"}).platform == "mps"
    from drivetrain.cli.launch_cmd import build_parser

    assert build_parser().parse_args(["--use_mps_device", "script.py"]).platform == "mps"


def test_discovery_does_not_import_torch():
    code = "import sys, drivetrain_mps.plugin; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.mps
@pytest.mark.skipif(not HAS_MPS, reason=NO_MPS_REASON)
def test_training_on_mps_for_real(fresh_state):
    from device_training import seeded_draws_repeat, train_linear

    from drivetrain import Accelerator

    accelerator = Accelerator(mixed_precision="fp16")
    assert accelerator.device.type == "mps"
    assert seeded_draws_repeat(accelerator)  # set_seed reaches the MPS generator
    losses = train_linear(accelerator)
    assert losses[-1] < losses[0] / 10
    assert accelerator.state.platform.free_memory(0) > 0
