"""The plugin manager, in-process: discovery, controls, refusals and registrations."""

from __future__ import annotations

import warnings

import pytest
from fake_plugins import FakeDist, FakeEntryPoint, failing_plugin, fake_plugin

from drivetrain.errors import PluginLoadError, PluginSelectionError
from drivetrain.plugin_api import PlatformSpec, PluginInfo, TrackerSpec, hookimpl
from drivetrain.plugin_manager import (
    PluginManager,
    PluginStatus,
    api_version_problem,
    call_chain,
    missing_requirements,
)

INFO = PluginInfo(api_version="1.0", description="test plugin")


@hookimpl
def _register_platforms():
    return [PlatformSpec(name="toy", factory="drivetrain.platform:Platform", priority=5)]


def toy_platform(name="toy", **extra):
    return fake_plugin(name, PLUGIN_INFO=INFO, drivetrain_register_platforms=_register_platforms, **extra)


def load(*entry_points, **env):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager = PluginManager(env=env, entry_points=list(entry_points)).load()
    manager.caught = [str(w.message) for w in caught]
    return manager


def test_installed_built_ins_are_discovered_through_entry_points():
    manager = PluginManager(env={}).load()
    cpu = manager.records["cpu"]
    assert cpu.source == "built-in"
    assert cpu.distribution == "drivetrain"
    assert cpu.status is PluginStatus.AVAILABLE
    assert cpu.kinds == ["platform"]
    assert "drivetrain_register_platforms" in cpu.hooks
    assert [spec.name for _, spec in manager.registrations("drivetrain_register_platforms") if _ == "cpu"] == ["cpu"]


def test_third_party_plugin_is_registered_with_its_descriptors():
    manager = load(toy_platform())
    record = manager.records["toy"]
    assert record.status is PluginStatus.AVAILABLE and record.source == "third-party"
    assert record.kinds == ["platform"] and record.api_version == "1.0"
    assert [(p, s.name) for p, s in manager.registrations("drivetrain_register_platforms")] == [("toy", "toy")]


def test_blocked_plugin_is_never_imported():
    imported = []
    entry = FakeEntryPoint("toy", "fake_toy", FakeDist("x"), lambda: imported.append(1))
    manager = load(entry, DRIVETRAIN_BLOCK_PLUGINS="other, toy")
    assert imported == []
    assert manager.records["toy"].status is PluginStatus.BLOCKED
    with pytest.raises(PluginSelectionError, match="blocked by DRIVETRAIN_BLOCK_PLUGINS"):
        manager.require("toy")


def test_autoload_off_skips_third_party_but_not_built_ins():
    built_in = toy_platform("builtin_toy")
    built_in.dist = FakeDist("drivetrain")
    manager = load(built_in, toy_platform(), DRIVETRAIN_DISABLE_PLUGIN_AUTOLOAD="1")
    assert manager.records["builtin_toy"].status is PluginStatus.AVAILABLE
    assert manager.records["toy"].status is PluginStatus.DISABLED
    assert "DRIVETRAIN_PLUGINS=toy" in manager.records["toy"].reason
    explicitly = load(toy_platform(), DRIVETRAIN_DISABLE_PLUGIN_AUTOLOAD="1", DRIVETRAIN_PLUGINS="toy")
    assert explicitly.records["toy"].status is PluginStatus.AVAILABLE


@pytest.mark.parametrize(
    "declared, problem",
    [("1.0", None), ("1.0.0", None), ("2.0", "upgrade drivetrain"), ("1.9", "upgrade drivetrain"),
     ("0.9", "upgrade the plugin"), ("banana", "not a version number")],
)
def test_api_version_check(declared, problem):
    answer = api_version_problem(declared, offered="1.0")
    assert (answer is None) if problem is None else (problem in answer)


def test_plugin_for_a_future_api_is_refused_with_the_reason():
    manager = load(fake_plugin("future", PLUGIN_INFO=PluginInfo(api_version="7.0"),
                               drivetrain_register_platforms=_register_platforms))
    record = manager.records["future"]
    assert record.status is PluginStatus.FAILED
    assert "needs plugin API 7.0" in record.reason
    assert manager.registrations("drivetrain_register_platforms") == []
    assert any("future" in message for message in manager.caught)


def test_import_error_is_recorded_and_other_plugins_still_load():
    manager = load(failing_plugin("boom", ImportError("No module named 'missing_lib'")), toy_platform())
    assert manager.records["boom"].status is PluginStatus.FAILED
    assert "ImportError: No module named 'missing_lib'" in manager.records["boom"].reason
    assert manager.records["toy"].status is PluginStatus.AVAILABLE


def test_system_exit_during_import_is_contained():
    manager = load(failing_plugin("exits", SystemExit(3)))
    assert manager.records["exits"].status is PluginStatus.FAILED


def test_wrong_hook_signature_is_refused():
    @hookimpl
    def drivetrain_register_platforms(colour):
        return []

    manager = load(fake_plugin("badsig", PLUGIN_INFO=INFO, drivetrain_register_platforms=drivetrain_register_platforms))
    record = manager.records["badsig"]
    assert record.status is PluginStatus.FAILED and "bad hook implementation" in record.reason
    assert "colour" in record.reason
    assert "badsig" not in manager.modules


def test_unknown_hook_is_refused():
    @hookimpl
    def drivetrain_register_platfroms():
        return []

    manager = load(fake_plugin("typo", PLUGIN_INFO=INFO, drivetrain_register_platfroms=drivetrain_register_platfroms))
    assert manager.records["typo"].status is PluginStatus.FAILED
    assert "unknown hook 'drivetrain_register_platfroms'" in manager.records["typo"].reason


def test_missing_plugin_info_is_refused():
    manager = load(fake_plugin("noinfo", drivetrain_register_platforms=_register_platforms))
    assert "PLUGIN_INFO" in manager.records["noinfo"].reason


def test_registration_hook_that_raises_fails_only_that_plugin():
    @hookimpl
    def drivetrain_register_platforms():
        raise ValueError("cannot describe myself")

    manager = load(fake_plugin("raiser", PLUGIN_INFO=INFO, drivetrain_register_platforms=drivetrain_register_platforms),
                   toy_platform())
    assert manager.records["raiser"].status is PluginStatus.FAILED
    assert "ValueError: cannot describe myself" in manager.records["raiser"].reason
    assert [p for p, _ in manager.registrations("drivetrain_register_platforms")] == ["toy"]


def test_duplicate_names_keep_the_first_and_report_the_second():
    first, second = toy_platform(), toy_platform()
    second.dist = FakeDist("another-dist")
    manager = load(first, second)
    assert manager.records["toy"].status is PluginStatus.AVAILABLE
    duplicate = manager.records["toy (another-dist)"]
    assert duplicate.status is PluginStatus.FAILED and "duplicate plugin name 'toy'" in duplicate.reason


def test_built_in_name_cannot_be_shadowed_by_a_third_party_plugin():
    third = toy_platform("cpu")
    built_in = toy_platform("cpu")
    built_in.dist = FakeDist("drivetrain")
    manager = load(third, built_in)  # listed third-party first; built-ins still load first
    assert manager.records["cpu"].source == "built-in"


def test_strict_mode_turns_a_failure_into_an_error():
    with pytest.raises(PluginLoadError, match="boom: import failed"):
        load(failing_plugin("boom", RuntimeError("x")), DRIVETRAIN_STRICT_PLUGINS="1")
    load(toy_platform(), DRIVETRAIN_STRICT_PLUGINS="1")  # nothing failed: fine


def test_missing_library_makes_a_plugin_unavailable_with_its_extra():
    info = PluginInfo(api_version="1.0", requires=("surely-not-installed-lib>=1.0",), extra="surely")
    manager = load(fake_plugin("needs", PLUGIN_INFO=info, drivetrain_register_platforms=_register_platforms))
    record = manager.records["needs"]
    assert record.status is PluginStatus.UNAVAILABLE
    assert record.install == "pip install 'drivetrain[surely]'"
    assert "surely-not-installed-lib (not installed)" in record.reason
    # still registered, so its descriptors are known and selecting it explains the fix
    assert manager.registrations("drivetrain_register_platforms")
    assert manager.registrations("drivetrain_register_platforms", usable_only=True) == []
    with pytest.raises(PluginSelectionError, match=r"pip install 'drivetrain\[surely\]'"):
        manager.require("needs")


def test_requirement_versions_are_checked_from_metadata():
    assert missing_requirements(["pluggy>=0.1"]) == []
    assert missing_requirements(["pluggy>=999"])[0].startswith("pluggy>=999 (found ")
    assert "not a valid requirement" in missing_requirements(["?? what"])[0]


def test_unknown_plugin_lists_installed_names():
    manager = load(toy_platform())
    with pytest.raises(PluginSelectionError, match="unknown plugin 'nope'; installed plugins: toy"):
        manager.require("nope")


def test_subset_caller_reaches_only_active_plugins_and_chains_in_order():
    calls = []

    def make(tag, **opts):
        @hookimpl(**opts)
        def drivetrain_convert_model(model, run):
            calls.append(tag)
            return model + [tag]

        return drivetrain_convert_model

    manager = load(
        fake_plugin("a", PLUGIN_INFO=INFO, drivetrain_convert_model=make("a")),
        fake_plugin("b", PLUGIN_INFO=INFO, drivetrain_convert_model=make("b", tryfirst=True)),
        fake_plugin("c", PLUGIN_INFO=INFO, drivetrain_convert_model=make("c")),
    )
    caller = manager.subset_caller("drivetrain_convert_model", active=["a", "b"])
    assert call_chain(caller, "model", [], run=None) == ["b", "a"]
    assert calls == ["b", "a"]


def test_trackers_of_a_third_party_plugin_are_registered():
    @hookimpl
    def drivetrain_register_trackers():
        return [TrackerSpec(name="mine", factory="json:dumps")]

    manager = load(fake_plugin("mytracker", PLUGIN_INFO=INFO, drivetrain_register_trackers=drivetrain_register_trackers))
    assert manager.records["mytracker"].kinds == ["tracker"]
    assert manager.registrations("drivetrain_register_trackers")[0][1].name == "mine"


def test_public_names_are_resolved_lazily_from_plugins(monkeypatch):
    import drivetrain
    from drivetrain import plugin_manager

    @hookimpl
    def drivetrain_public_names():
        return {"FancyPlugin": "collections:OrderedDict"}

    manager = load(fake_plugin("fancy", PLUGIN_INFO=INFO, drivetrain_public_names=drivetrain_public_names))
    monkeypatch.setattr(plugin_manager, "_default_manager", manager)
    monkeypatch.delitem(drivetrain.__dict__, "FancyPlugin", raising=False)
    import collections

    assert drivetrain.FancyPlugin is collections.OrderedDict
    assert "FancyPlugin" in dir(drivetrain)
    with pytest.raises(AttributeError):
        drivetrain.NoSuchThing  # noqa: B018
