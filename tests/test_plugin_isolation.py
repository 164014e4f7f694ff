"""A hostile third-party plugin (tests/plugin_dists/drivetrain-hostile-*) breaks nothing but itself.

Each loads in this process with a short DRIVETRAIN_PLUGIN_TIMEOUT; one launch in a fresh
interpreter checks what only a process boundary shows (an os._exit at import).
"""

from __future__ import annotations

import json
import warnings

import pytest
from conftest import run_cli
from fake_plugins import fake_plugin
from local_devices import local_accelerator

from drivetrain import plugin_manager
from drivetrain.errors import PluginHookError, PluginSelectionError, PluginWarning
from drivetrain.plugin_api import PluginInfo, hookimpl
from importlib import metadata as importlib_metadata
from drivetrain.plugin_manager import PluginManager, PluginStatus

TIMEOUT = {"DRIVETRAIN_PLUGIN_TIMEOUT": "0.5"}


@pytest.fixture
def hostile(hostile_site, with_sites, fresh_state, monkeypatch):
    """The process-wide manager, loaded with the hostile plugins installed."""
    with_sites(hostile_site)
    monkeypatch.setenv("DRIVETRAIN_PLUGIN_TIMEOUT", TIMEOUT["DRIVETRAIN_PLUGIN_TIMEOUT"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager = PluginManager().load()
    monkeypatch.setattr(plugin_manager, "_default_manager", manager)
    return manager


def test_imports_that_hang_exit_or_interrupt_are_recorded_and_skipped(hostile_site, with_sites, capsys):
    with_sites(hostile_site)
    with pytest.warns(PluginWarning, match=r"3 plugin\(s\) skipped \(hostile_exit, hostile_interrupt, "
                                           r"hostile_sleep\)") as caught:
        manager = PluginManager(env=TIMEOUT).load()
    assert len(caught) == 1
    records = manager.records
    assert records["hostile_sleep"].status is PluginStatus.FAILED
    assert records["hostile_sleep"].reason == ("import failed: did not answer within 0.5 s (raise the limit with "
                                               "DRIVETRAIN_PLUGIN_TIMEOUT=SECONDS, 0 for none)")
    assert records["hostile_exit"].reason == "import failed: called os._exit(0)"
    assert records["hostile_interrupt"].reason == "import failed: KeyboardInterrupt: raised by a plugin, not by the user"
    assert records["cpu"].usable and records["hostile_print"].usable
    assert "hostile_sleep" not in manager.modules
    with pytest.warns(PluginWarning, match=r"DRIVETRAIN_PLUGIN_TIMEOUT='soon' is not a number of seconds"):
        assert PluginManager(env={"DRIVETRAIN_PLUGIN_TIMEOUT": "soon"}).timeout == 10


def test_a_probe_that_never_answers_and_a_platform_that_cannot_start_fall_back_to_the_next(hostile, monkeypatch):
    from drivetrain.detection import detect
    from drivetrain.selection.choice import Requests, choose_platform
    from drivetrain.state import PartialState

    with pytest.warns(PluginWarning, match=r"^the probe of plugin 'hostile_probe' did not answer within 0.5 s"):
        stuck = next(c for c in detect(hostile).candidates if c.name == "stuckaccel")
    assert not stuck.available and stuck.reason.startswith("probe failed: did not answer within 0.5 s")
    with pytest.warns(PluginWarning, match=r"skipped the detected platform 'brokenaccel' \(plugin 'hostile_platform'\), "
                                           rf"'{local_accelerator()}' runs instead: .*OSError: device /dev/brokenaccel0 "
                                           r"is not responding"):
        state = PartialState()
    assert state.run.selection.platform.name == local_accelerator()
    # Asked for by name, it is one error naming the plugin and the fix, not a bare OSError.
    PartialState._reset_state()
    monkeypatch.setenv("DRIVETRAIN_PLATFORM", "brokenaccel")
    with pytest.raises(PluginSelectionError, match=r"^platform 'brokenaccel' of plugin 'hostile_platform' "
                                                   r"\(drivetrain-hostile-platform\) cannot start: OSError: .*"
                                                   r"pip install -U drivetrain-hostile-platform") as raised:
        PartialState()
    assert isinstance(raised.value.__cause__, OSError)
    assert choose_platform(hostile, Requests(platform="brokenaccel"))[1] == "requested"


def test_a_hook_raising_in_prepare_names_its_plugin(hostile, monkeypatch):
    import torch

    from drivetrain import Accelerator

    monkeypatch.setenv("DRIVETRAIN_USE_HOSTILE", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)  # the broken platform, said above
        accelerator = Accelerator()
    with pytest.raises(PluginHookError, match=r"^plugin 'hostile_prepare' \(drivetrain-hostile-prepare 0.0.1\) failed in "
                                              r"drivetrain_wrap_model: OSError: the hostile wrapper lost its device; .*"
                                              r"DRIVETRAIN_BLOCK_PLUGINS=hostile_prepare$") as raised:
        accelerator.prepare(torch.nn.Linear(2, 2))
    assert isinstance(raised.value.__cause__, OSError)


def test_a_prepare_hook_raising_names_its_plugin_and_a_built_in_error_passes_unchanged(fresh_state, monkeypatch):
    import torch

    from drivetrain import Accelerator

    @hookimpl
    def drivetrain_transform_objects(objects, run, accelerator):
        raise ValueError("cannot convert")

    info = PluginInfo(api_version="2.0", features=["converts"])
    fake = fake_plugin("converts", PLUGIN_INFO=info, drivetrain_transform_objects=drivetrain_transform_objects)
    manager = PluginManager(env={}, entry_points=[*importlib_metadata.entry_points(group="drivetrain.plugins"), fake])
    monkeypatch.setattr(plugin_manager, "_default_manager", manager.load())
    monkeypatch.setenv("DRIVETRAIN_USE_CONVERTS", "1")
    accelerator = Accelerator()
    with pytest.raises(PluginHookError, match=r"^plugin 'converts' \(someone-else 1.0\) failed in "
                                              r"drivetrain_transform_objects: ValueError: cannot convert;"):
        accelerator.prepare(torch.nn.Linear(2, 2))
    # A hook of the core's own plugins raises as it always did.
    assert manager.hook_failure("drivetrain_transform_objects", [], ValueError("x")) is None


def test_launch_hooks_of_a_broken_plugin_are_skipped_unless_it_is_selected(hostile, monkeypatch):
    from drivetrain.cli import launch_cmd

    parser = launch_cmd.build_parser()
    args = parser.parse_args(["--cpu", "--num_processes", "1", "--num_machines", "1", "script.py"])
    launch_cmd.merge_config(args, parser)
    with pytest.warns(PluginWarning, match=r"plugin 'hostile_launch' \(drivetrain-hostile-launch 0.0.1\) failed in "
                                           r"launcher 'hostile' applies\(\): AttributeError: .*left out of this launch"):
        name, _launcher = launch_cmd.choose_launcher(args)
    assert name != "hostile"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = launch_cmd.child_environment(args)
    assert env["DRIVETRAIN_PLATFORM"] == "cpu"
    assert any("failed in drivetrain_launch_environment: KeyError: 'HOSTILE_HOME'" in str(w.message) for w in caught)
    monkeypatch.setenv("DRIVETRAIN_PLUGINS", "hostile_launch")
    with pytest.raises(PluginHookError, match=r"^plugin 'hostile_launch' .* drivetrain_launch_environment: KeyError"):
        launch_cmd.child_environment(args)


@pytest.mark.parametrize("command", [["plugins", "list", "--json"], ["env", "--json"]])
def test_json_commands_write_only_json_whatever_a_plugin_prints(hostile, command, capsys):
    from drivetrain.cli.main import main

    monkeypatch_manager = plugin_manager._default_manager
    plugin_manager.reset_plugin_manager(None)  # loaded by the command itself, printing included
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PluginWarning)
            assert main(command) == 0
    finally:
        plugin_manager.reset_plugin_manager(monkeypatch_manager)
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data
    assert "hostile_print: registering" in captured.err  # it printed, to stderr


def test_launch_runs_the_script_whatever_the_installed_plugins_do(hostile_site, tmp_path):
    """os._exit(0) at import used to end `drivetrain launch` with status 0, having run nothing."""
    script = tmp_path / "script.py"
    script.write_text("print('the script ran')\n")
    result = run_cli("launch", "--cpu", str(script), sites=(hostile_site,), env={"DRIVETRAIN_PLUGIN_TIMEOUT": "1"})
    assert result.returncode == 0, result.stderr
    assert "the script ran" in result.stdout
    assert "hostile_exit, hostile_interrupt, hostile_sleep" in result.stderr
