"""The third-party template (examples/plugin_template) as a vendor would ship it: installed
by pip as its own distribution, its ``toyaccel`` platform detected by priority, chosen by
name, seeded and checkpointed, sizing device maps, and training with DDP over its own
collectives backend."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from conftest import clean_environ

BUDGET = 40_000  # bytes of toyaccel memory: less than the test model below
# Built-in platforms that outrank toyaccel (priority 50) where their device is present: blocked,
# so these tests choose the same on a GPU machine as on a CPU one.
HIGHER = {"DRIVETRAIN_BLOCK_PLUGINS": "cuda,xla"}


@pytest.fixture
def toyaccel(template_site, with_sites, fresh_state, monkeypatch):
    """This process with the template installed and a fresh plugin manager; sets the device count."""
    from drivetrain import plugin_manager

    with_sites(template_site)
    monkeypatch.delenv("TOYACCEL_DEVICES", raising=False)
    monkeypatch.delenv("TOYACCEL_MEMORY", raising=False)
    for key, value in HIGHER.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(plugin_manager, "_default_manager", plugin_manager.PluginManager().load())

    def devices(count: int | None) -> plugin_manager.PluginManager:
        if count is None:
            monkeypatch.delenv("TOYACCEL_DEVICES", raising=False)
        else:
            monkeypatch.setenv("TOYACCEL_DEVICES", str(count))
        return plugin_manager.get_plugin_manager()

    return devices


def test_one_distribution_two_plugins_listed_with_the_platform_report(cli, template_site):
    result = cli("plugins", "list", "--json", "--detect", sites=(template_site,),
                     env={"TOYACCEL_DEVICES": "2", **HIGHER})
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    plugins = {p["name"]: p for p in data["plugins"]}
    toy = plugins["toyaccel"]
    assert (toy["source"], toy["distribution"]) == ("third-party", "drivetrain-toyaccel")
    assert sorted(toy["kinds"]) == ["platform", "strategy"]
    assert plugins["jsonl"]["distribution"] == "drivetrain-toyaccel"
    assert data["detection"]["platform"] == "toyaccel"
    env = cli("env", sites=(template_site,), env={"TOYACCEL_DEVICES": "2", "TOYACCEL_MEMORY": "512MiB"})
    assert env.returncode == 0, env.stderr
    assert "toyaccel devices: 2 toyaccel device(s)" in env.stdout
    assert "toyaccel memory per device: 0.50 GiB" in env.stdout


def test_detected_by_priority_only_when_its_probe_finds_a_device(toyaccel):
    from drivetrain.errors import PluginSelectionError
    from drivetrain.selection.choice import Requests, select

    selection = select(toyaccel(1), Requests())
    assert selection.platform_plugin == "toyaccel"
    assert selection.reasons["platform"] == "detected (priority 50): 1 toyaccel device(s)"
    assert select(toyaccel(1), Requests(cpu=True)).platform.name == "cpu"  # an explicit choice wins
    assert select(toyaccel(0), Requests()).platform.name == "cpu"
    assert select(toyaccel(None), Requests()).platform.name == "cpu"
    with pytest.raises(PluginSelectionError, match=r"platform 'toyaccel' was requested but is not usable here: "
                                                   r"no toyaccel device \(TOYACCEL_DEVICES is unset\)"):
        select(toyaccel(None), Requests(platform="toyaccel"))


def test_its_precision_list_takes_bf16_and_refuses_fp16(toyaccel):
    from drivetrain.errors import IncompatibleChoiceError
    from drivetrain.selection.choice import Requests, select

    manager = toyaccel(1)
    assert select(manager, Requests(mixed_precision="bf16")).mixed_precision == "bf16"
    with pytest.raises(IncompatibleChoiceError, match=r"mixed precision 'fp16' is not supported by platform "
                                                      r"'toyaccel' \(it supports bf16\)"):
        select(manager, Requests(mixed_precision="fp16"))


def test_set_seed_and_checkpoints_carry_its_own_generator(toyaccel, tmp_path):
    from drivetrain import Accelerator
    from drivetrain.utils import set_seed

    toyaccel(1)
    accelerator = Accelerator()
    assert accelerator.state.platform.name == "toyaccel"
    from drivetrain_toyaccel import runtime

    set_seed(3)
    first = runtime.randn(5)
    torch.manual_seed(99)  # torch's generator is not the device's
    set_seed(3)
    assert torch.equal(runtime.randn(5), first)

    model = accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.save_state(tmp_path / "ckpt")
    expected = runtime.randn(5)
    runtime.randn(100)  # move only the device generator on
    accelerator.load_state(tmp_path / "ckpt")
    assert torch.equal(runtime.randn(5), expected)
    assert model.weight.device == accelerator.device


def test_its_rng_type_member_names_the_device_generator(toyaccel, caplog):
    from drivetrain import Accelerator
    from drivetrain.utils import RNGType, set_seed, synchronize_rng_state

    toyaccel(1)
    Accelerator()
    from drivetrain_toyaccel import runtime

    assert RNGType.TOYACCEL == "toyaccel" and RNGType.TOYACCEL.name == "TOYACCEL"
    assert "toyaccel" in RNGType.values()
    set_seed(5)
    expected = runtime.randn(4)
    set_seed(5)
    with caplog.at_level("WARNING", logger="drivetrain.utils.random"):
        synchronize_rng_state(RNGType.TOYACCEL)  # this run's device: taken, and one process keeps its own
        assert caplog.records == []
        synchronize_rng_state(RNGType.XLA)  # another platform's generator is only warned about
    assert [r.getMessage() for r in caplog.records] == [
        "rng type 'xla' is not this run's platform (toyaccel); it is not synchronised"]
    assert torch.equal(runtime.randn(4), expected)


def test_device_maps_honour_its_memory_report(toyaccel, monkeypatch):
    from drivetrain import Accelerator
    from drivetrain.utils import compute_module_sizes, get_max_memory, infer_auto_device_map

    toyaccel(1)
    monkeypatch.setenv("TOYACCEL_MEMORY", str(BUDGET))
    Accelerator()
    memory = get_max_memory()
    assert memory[0] == BUDGET and list(memory) == [0, "cpu"]
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(32, 32) for _ in range(12)))  # 12 x 4224 bytes
    device_map = infer_auto_device_map(model)
    sizes = compute_module_sizes(model)
    on_device = [name for name, device in device_map.items() if device == 0]
    assert on_device and "cpu" in device_map.values()
    assert sum(sizes[name] for name in on_device) <= BUDGET


def test_its_strategy_is_one_object_per_run_that_keeps_the_runs_state(toyaccel):
    from drivetrain import Accelerator
    from drivetrain.errors import ConfigError
    from drivetrain.state import AcceleratorState

    toyaccel(1)
    from drivetrain_toyaccel.strategy import GradientAveraging, ToyAverageOptions

    options = ToyAverageOptions(reduction="sum")
    accelerator = Accelerator(toyaverage_plugin=options, gradient_accumulation_steps=2)
    strategy = accelerator.run.strategy
    assert isinstance(strategy, GradientAveraging) and accelerator.run.selection.strategy.name == "toyaverage"
    assert accelerator.toyaverage_plugin is options and accelerator.state.toyaverage_plugin is options
    assert not hasattr(accelerator, "windows")  # only what the strategy exposes
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(4):  # two windows of two steps
        with accelerator.accumulate(model):
            accelerator.backward(model(torch.ones(1, 2, device=accelerator.device)).sum())
            optimizer.step()
            optimizer.zero_grad()
    assert strategy.windows == 2
    # a new run chooses again and gets a new object; bad options fail when the Accelerator is built
    AcceleratorState._reset_state(reset_partial_state=True)
    with pytest.raises(ConfigError, match=r"reduction='max'.*choose one of them"):
        Accelerator(toyaverage_plugin=ToyAverageOptions(reduction="max"))
    AcceleratorState._reset_state(reset_partial_state=True)
    from drivetrain.plugin_api import Strategy

    assert type(Accelerator().run.strategy) is Strategy  # one process, nothing asked for: the plain strategy


def test_ddp_training_on_two_toyaccel_processes_over_its_backend(template_site):
    """``--platform toyaccel`` and no process count: one process per device it reports."""
    env = clean_environ()
    env.update(TOYACCEL_DEVICES="2", PYTHONPATH=os.pathsep.join([str(template_site), env.get("PYTHONPATH", "")]))
    script = os.path.join(os.path.dirname(__file__), "scripts", "check_toyaccel.py")
    result = subprocess.run([sys.executable, "-m", "drivetrain", "launch", "--platform", "toyaccel", script],
                            capture_output=True, text=True, env=env, timeout=240)
    assert result.returncode == 0, f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    # Ranks share the launcher's unbuffered stdout, so one rank's line may land inside another's.
    assert sorted(re.findall(r"CHECK-TOYACCEL-OK (\d+)", result.stdout)) == ["0", "1"], result.stdout


def test_the_template_imports_only_the_plugin_api():
    """What a vendor copies must not lean on drivetrain's internals."""
    import ast

    from conftest import TEMPLATE

    found = {}
    for path in TEMPLATE.glob("drivetrain_*/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            found.update({f"{path.parent.name}/{path.name}: {n}": n for n in names
                          if n == "drivetrain" or n.startswith("drivetrain.")})
    assert found and all(n == "drivetrain.plugin_api" or n.startswith("drivetrain.plugin_api.")
                         for n in found.values()), sorted(found)
