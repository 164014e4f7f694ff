"""Device random generators go through the platform plugin: seeding, synchronising and
checkpointing name no device. A fake platform plugin, loaded in-process beside the built-in
ones, stands for any accelerator: whatever its generator is, the core reaches it only through
``Platform.manual_seed_all`` / ``get_rng_state`` / ``set_rng_state``."""

from __future__ import annotations

import warnings

import pytest
import torch
from fake_plugins import fake_plugin

from drivetrain import plugin_manager
from drivetrain.errors import ConfigError
from drivetrain.plugin_api import PlatformSpec, PluginInfo, Probe, hookimpl
from importlib import metadata as importlib_metadata
from drivetrain.plugin_manager import PluginManager
from drivetrain.utils import random as rng


class RecordingPlatform:
    """What the fake platform was asked: seeds, and the first bytes of each state restored."""

    seeds: list[int] = []
    restored: list[list[int]] = []


def _platform_class():
    """The spec's factory: imports the base class only when the platform is built, as a real
    plugin's factory module would."""
    from drivetrain.plugin_api import Platform

    class FakeDevicePlatform(Platform):
        name = "fakedev"
        device_type = "cpu"  # its tensors live on the CPU; its generator is its own

        def __init__(self):
            self.generator = torch.Generator().manual_seed(0)

        def manual_seed_all(self, seed):
            RecordingPlatform.seeds.append(seed)
            self.generator.manual_seed(seed)

        def get_rng_state(self):
            return self.generator.get_state()

        def set_rng_state(self, state):
            RecordingPlatform.restored.append(state[:8].tolist())
            self.generator.set_state(state)

    return FakeDevicePlatform()


def fakedev_plugin(available=True):
    @hookimpl
    def drivetrain_register_platforms():
        return [PlatformSpec(name="fakedev", factory=_platform_class, priority=500,
                             probe=lambda: Probe(available, "a fake device" if available else "none here"),
                             communication="torch_distributed")]

    return fake_plugin("fakedev", PLUGIN_INFO=PluginInfo(api_version="2.0"),
                       drivetrain_register_platforms=drivetrain_register_platforms)


@pytest.fixture
def with_fakedev(monkeypatch, fresh_state):
    def install(available=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            manager = PluginManager(env={}, entry_points=[*importlib_metadata.entry_points(group="drivetrain.plugins"),
                                                          fakedev_plugin(available)]).load()
        monkeypatch.setattr(plugin_manager, "_default_manager", manager)
        monkeypatch.setattr(rng, "_usable_platforms", None)
        RecordingPlatform.seeds.clear()
        RecordingPlatform.restored.clear()
        return manager

    return install


def test_set_seed_before_any_state_seeds_every_usable_platform(with_fakedev):
    from drivetrain.state import PartialState
    from drivetrain.utils import set_seed

    with_fakedev()
    assert "platform" not in PartialState._shared_state
    set_seed(21)
    assert RecordingPlatform.seeds == [21]
    assert "platform" not in PartialState._shared_state  # seeding does not make the state
    assert [type(p).__name__ for p in rng.usable_platforms()].count("FakeDevicePlatform") == 1


def test_an_unusable_platform_is_not_seeded(with_fakedev):
    from drivetrain.utils import set_seed

    with_fakedev(available=False)
    set_seed(3)
    assert RecordingPlatform.seeds == []


def test_once_the_state_exists_its_platform_is_seeded_and_device_specific_adds_the_rank(with_fakedev):
    from drivetrain import PartialState
    from drivetrain.utils import set_seed

    with_fakedev()
    state = PartialState()
    assert state.platform.name == "fakedev"  # priority 500 wins detection
    set_seed(7, device_specific=True)
    set_seed(8)
    assert RecordingPlatform.seeds == [7 + state.process_index, 8]
    draws = torch.randn(3, generator=state.platform.generator)
    set_seed(8)
    assert torch.equal(torch.randn(3, generator=state.platform.generator), draws)


def test_synchronize_names_generators_by_platform(with_fakedev):
    from drivetrain import PartialState, RNGType
    from drivetrain.utils import synchronize_rng_state, synchronize_rng_states

    with_fakedev()
    PartialState()
    assert "fakedev" in RNGType.values() and RNGType("fakedev") == "fakedev"
    synchronize_rng_states(["torch", "fakedev"])  # one process: nothing to receive, nothing fails
    with pytest.raises(ConfigError, match="unknown random generator type 'nodevice'"):
        synchronize_rng_state("nodevice")


def test_checkpoints_keep_and_restore_the_platforms_generator(with_fakedev, tmp_path):
    from drivetrain import Accelerator

    with_fakedev()
    accelerator = Accelerator()
    platform = accelerator.state.platform
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    platform.manual_seed_all(99)
    saved = platform.get_rng_state().clone()
    directory = accelerator.save_state(tmp_path / "ckpt")
    accelerator.wait_for_everyone()
    expected = torch.randn(4, generator=platform.generator)
    platform.manual_seed_all(1)
    RecordingPlatform.restored.clear()
    accelerator.load_state(directory)
    assert RecordingPlatform.restored == [saved[:8].tolist()]
    assert torch.equal(torch.randn(4, generator=platform.generator), expected)
    assert model.weight.shape == (2, 2)


@pytest.mark.parametrize("name", ["cpu", "cuda", "mps", "xpu"])
def test_built_in_platforms_bring_all_three_generator_methods_or_none(name):
    """A platform with a device generator overrides seeding, reading and restoring it together
    (a checkpoint of a seeded generator must come back); the CPU's is torch's own (none)."""
    from drivetrain.plugin_api import Platform, resolve
    from drivetrain.plugin_manager import get_plugin_manager

    spec = next(s for _p, s in get_plugin_manager().registrations("drivetrain_register_platforms") if s.name == name)
    cls = resolve(spec.factory)
    overridden = {method for method in ("manual_seed_all", "get_rng_state", "set_rng_state")
                  if getattr(cls, method) is not getattr(Platform, method)}
    assert overridden in (set(), {"manual_seed_all", "get_rng_state", "set_rng_state"})
    assert (overridden == set()) == (name == "cpu")
