"""The plugin manager, in-process: discovery, controls, refusals and registrations."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from fake_plugins import FakeDist, FakeEntryPoint, failing_plugin, fake_plugin

from drivetrain.errors import PluginLoadError, PluginSelectionError
from drivetrain.plugin_api import (
    ClusterEnvironmentSpec,
    LauncherSpec,
    PlatformSpec,
    PluginInfo,
    PrecisionSpec,
    Probe,
    StrategySpec,
    TrackerSpec,
    hookimpl,
)
from importlib import metadata as importlib_metadata

from drivetrain.plugin_manager import (
    PluginManager,
    PluginStatus,
    api_version_problem,
    installed_entry_points,
    installed_version,
    missing_requirements,
)

INFO = PluginInfo(api_version="2.0", description="test plugin")


@hookimpl
def _register_platforms():
    return [PlatformSpec(name="toy", factory="drivetrain.platform:Platform", priority=5)]


def toy_platform(name="toy", **extra):
    return fake_plugin(name, PLUGIN_INFO=INFO, drivetrain_register_platforms=_register_platforms, **extra)


def built_ins():
    return list(importlib_metadata.entry_points(group="drivetrain.plugins"))


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
    assert record.kinds == ["platform"] and record.api_version == "2.0"
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
    [("1.0", None), ("1.0.0", None), ("1.0rc1", None), ("2.0", "upgrade drivetrain"), ("1.9", "upgrade drivetrain"),
     ("0.9", "upgrade the plugin"), ("banana", "not a version number"), ("1.x", "not a version number")],
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


def test_wrong_types_in_plugin_info_refuse_each_plugin_and_keep_the_others():
    broken = {
        "float_version": PluginInfo(api_version=1.5),
        "none_version": PluginInfo(api_version=None),
        "string_requires": PluginInfo(api_version="2.0", requires="torch"),
        "number_feature": PluginInfo(api_version="2.0", features=("compile", 3)),
        "number_description": PluginInfo(api_version="2.0", description=7),
        "list_extra": PluginInfo(api_version="2.0", extra=["x"]),
        "two_line_description": PluginInfo(api_version="2.0", description="one\ntwo"),
    }
    manager = load(*(fake_plugin(name, PLUGIN_INFO=info, drivetrain_register_platforms=_register_platforms)
                     for name, info in broken.items()), toy_platform())
    for name in broken:
        record = manager.records[name]
        assert record.status is PluginStatus.FAILED, name
        assert "fix PLUGIN_INFO" in record.reason and "\n" not in record.reason, record.reason
    assert "1.5 (float)" in manager.records["float_version"].reason
    assert manager.records["toy"].status is PluginStatus.AVAILABLE
    assert api_version_problem(1.5) is not None


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


def test_a_registration_refused_part_way_leaves_no_hook_behind():
    # pluggy before 1.7 stops at the first bad hook and keeps the plugin's name; unregistering
    # must then find only the hooks it added (it raises for a caller without the plugin)
    import types

    import pluggy

    from drivetrain import hookspecs
    from drivetrain.kernel.hook_registry import HookRegistry

    @hookimpl
    def drivetrain_register_platforms(colour):
        return []

    module = types.ModuleType("half_registered")
    module.drivetrain_register_platforms = drivetrain_register_platforms
    registry = HookRegistry("drivetrain")
    registry.add_hookspecs(hookspecs)
    with pytest.raises(pluggy.PluginValidationError):
        registry.register(module, name="half")
    assert not registry.get_hookcallers(module)
    registry.unregister(name="half")
    assert registry.get_plugin("half") is None


def test_the_properties_of_a_role_object_are_not_run_to_find_its_hooks(monkeypatch):
    # pluggy before 1.7 reads every attribute with getattr; a property that needs its run
    # (an FSDP strategy's options before prepare) raised and the strategy could not register
    import pluggy

    from drivetrain.kernel.hook_registry import HookRegistry

    def read_like_old_pluggy(self, plugin, name):
        return getattr(getattr(plugin, name), "drivetrain_impl", None)

    monkeypatch.setattr(pluggy.PluginManager, "parse_hookimpl_opts", read_like_old_pluggy)

    class Role:
        @property
        def options(self):
            raise AttributeError("options: not prepared yet")

        @hookimpl
        def drivetrain_register_platforms(self):
            return []

    registry = HookRegistry("drivetrain")
    assert registry.parse_hookimpl_opts(Role(), "options") is None
    assert registry.parse_hookimpl_opts(Role(), "drivetrain_register_platforms") is not None


def test_unknown_hook_is_refused():
    @hookimpl
    def drivetrain_register_platfroms():
        return []

    manager = load(fake_plugin("typo", PLUGIN_INFO=INFO, drivetrain_register_platfroms=drivetrain_register_platfroms))
    assert manager.records["typo"].status is PluginStatus.FAILED
    assert "unknown hook 'drivetrain_register_platfroms'" in manager.records["typo"].reason


def test_plugins_checked_after_a_refused_one_are_judged_on_their_own():
    # the hooks are checked on one scratch manager, reused while it stays clean: a plugin
    # refused half-way through must leave nothing behind for the next ones
    @hookimpl
    def drivetrain_register_platforms(colour):
        return []

    @hookimpl
    def drivetrain_register_platfroms():
        return []

    @hookimpl
    def none():
        return []

    none.__name__ = "drivetrain_register_precisions"
    manager = load(fake_plugin("a_badsig", PLUGIN_INFO=INFO, drivetrain_register_platforms=_register_platforms,
                               drivetrain_register_strategies=drivetrain_register_platforms),
                   fake_plugin("b_typo", PLUGIN_INFO=INFO, drivetrain_register_platfroms=drivetrain_register_platfroms),
                   toy_platform("c_good"), fake_plugin("d_good", PLUGIN_INFO=INFO, drivetrain_register_precisions=none))
    assert manager.records["a_badsig"].status is PluginStatus.FAILED
    assert manager.records["b_typo"].status is PluginStatus.FAILED
    for name, hook in (("c_good", "drivetrain_register_platforms"), ("d_good", "drivetrain_register_precisions")):
        assert manager.records[name].status is PluginStatus.AVAILABLE, manager.records[name].reason
        assert manager.records[name].hooks == [hook]


def test_loading_the_installed_plugins_parses_no_metadata_file_and_no_requirement_in_full():
    # each distribution's name and version come from its metadata's header lines, and plain
    # requirements ("tensorboard>=2.14") need neither packaging's parser nor the email package
    code = ("import sys\n"
            "from drivetrain.plugin_manager import get_plugin_manager\n"
            "manager = get_plugin_manager()\n"
            "assert manager.records['cpu'].distribution == 'drivetrain', manager.records['cpu']\n"
            "print(sorted(m for m in ('packaging.requirements', 'email.feedparser', 'email.parser') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]"]


def test_loading_the_installed_plugins_creates_no_option_class():
    # registration reads the option names and choices only; the option dataclasses
    # (DeepSpeedPlugin, FullyShardedDataParallelPlugin, ...) wait until a run or a launch uses them
    options = ("drivetrain_deepspeed.options", "drivetrain_fsdp.options", "drivetrain_megatron.options",
               "drivetrain_fsdp.parallelism.config")
    code = ("import sys\n"
            "from drivetrain.plugin_manager import get_plugin_manager\n"
            "manager = get_plugin_manager()\n"
            "assert {'deepspeed', 'fsdp', 'megatron', 'parallelism'} <= set(manager.modules), manager.records\n"
            "assert manager.registrations('drivetrain_register_config_sections')\n"
            f"print(sorted(m for m in {options!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]"]


def test_installed_version_reads_the_version_and_is_none_when_absent(template_site, with_sites):
    assert installed_version("pluggy") == importlib_metadata.version("pluggy")
    name = "drivetrain-toyaccel"  # examples/plugin_template's distribution
    assert installed_version(name) is None
    with_sites(template_site)  # installed at run time, in a directory added to the path: seen
    assert installed_version(name) == importlib_metadata.version(name)


def _dist_info(site, name, version, entry_points=None):
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


def test_entry_points_are_found_as_importlib_metadata_finds_them(tmp_path, with_sites):
    # only files that name the group are parsed; the first copy of a distribution on the path
    # counts, even when a later copy declares the group and the first does not
    group = "[drivetrain.plugins]\n"
    _dist_info(tmp_path / "a", "dt-toy-one", "1.0", "[console_scripts]\ntoy = toy:main\n" + group + "one = toy_one\n")
    _dist_info(tmp_path / "a", "dt_toy.two", "1.0", "[console_scripts]\ntwo = toy:main\n")
    _dist_info(tmp_path / "b", "dt-toy-two", "2.0", group + "two = toy_two\n")
    _dist_info(tmp_path / "b", "dt-toy-three", "1.0", "# [drivetrain.plugins] is not a section here\n[other]\nx = y\n")
    with_sites(tmp_path / "b", tmp_path / "a")
    found = installed_entry_points()
    assert [(ep.name, ep.value) for ep in found] == [
        (ep.name, ep.value) for ep in importlib_metadata.entry_points(group="drivetrain.plugins")]
    mine = {ep.name: ep for ep in found if ep.name in ("one", "two")}
    assert list(mine) == ["one"] and mine["one"].dist.metadata["Name"] == "dt-toy-one"
    assert {ep.name for ep in found} >= {ep.name for ep in built_ins()}


def test_entry_points_in_egg_info_and_zip_entries_are_found_as_importlib_metadata_finds_them(tmp_path, with_sites):
    # discovery lists directories itself; an .egg-info folder is read the same way, and a zip
    # file on the path is left to importlib.metadata
    import zipfile

    group = "[drivetrain.plugins]\n"
    egg = tmp_path / "eggs" / "dt_toy_egg-1.0-py3.11.egg-info"
    egg.mkdir(parents=True)
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: dt-toy-egg\nVersion: 1.0\n")
    (egg / "entry_points.txt").write_text(group + "egg = toy_egg:plugin\n")
    archive = tmp_path / "zipped.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("dt_toy_zip-3.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: dt-toy-zip\nVersion: 3.0\n")
        zipped.writestr("dt_toy_zip-3.0.dist-info/entry_points.txt", group + "zipped = toy_zip\n")
    with_sites(tmp_path / "eggs", archive)
    found = {ep.name: ep for ep in installed_entry_points()}
    expected = {ep.name: ep.value for ep in importlib_metadata.entry_points(group="drivetrain.plugins")}
    assert {name: ep.value for name, ep in found.items()} == expected
    assert (found["egg"].module, found["egg"].attr) == ("toy_egg", "plugin")
    assert installed_version("dt_toy.egg") == "1.0" and installed_version("DT-Toy-Zip") == "3.0"


def test_a_finder_that_provides_distributions_is_asked_through_importlib_metadata(tmp_path, monkeypatch):
    # a distribution that only a custom meta-path finder knows is still found
    _dist_info(tmp_path, "dt-toy-found", "4.0", "[drivetrain.plugins]\nfound = toy_found\n")

    class Finder:
        @staticmethod
        def find_spec(*args, **kwargs):
            return None

        @staticmethod
        def find_distributions(context=None):
            name = getattr(context, "name", None)
            if name in (None, "dt-toy-found"):
                yield importlib_metadata.PathDistribution(tmp_path / "dt-toy-found-4.0.dist-info")

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    assert "found" in {ep.name for ep in installed_entry_points()}
    assert {ep.name for ep in installed_entry_points()} >= {ep.name for ep in built_ins()}


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
    info = PluginInfo(api_version="2.0", requires=("surely-not-installed-lib>=1.0",), extra="surely")
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


def test_requirement_versions_are_checked_from_metadata(monkeypatch):
    assert missing_requirements(["pluggy>=0.1"]) == []
    assert missing_requirements(["pluggy>=999"])[0].startswith("pluggy>=999 (found ")
    from drivetrain.kernel import installed

    # release numbers are compared without packaging; other forms go through it
    for found, wanted, met in (("2.13.0+cpu", "2.4", True), ("2.13", "2.13.0", True), ("1.9.9", "1.10", False),
                               ("2.0.0rc1", "2.0", False), ("2.0.0.post1", "2.0", True)):
        monkeypatch.setattr(installed, "installed_version", lambda name, found=found: found)
        assert (missing_requirements([f"lib>={wanted}"]) == []) is met, (found, wanted)
    assert "not a valid requirement" in missing_requirements(["?? what"])[0]


def test_unknown_plugin_lists_installed_names():
    manager = load(toy_platform())
    with pytest.raises(PluginSelectionError, match="unknown plugin 'nope'; installed plugins: toy"):
        manager.require("nope")


def test_subset_caller_reaches_only_active_plugins_in_order():
    calls = []

    def make(tag, **opts):
        @hookimpl(**opts)
        def drivetrain_configure_run(run, accelerator):
            calls.append(tag)
            return tag

        return drivetrain_configure_run

    manager = load(
        fake_plugin("a", PLUGIN_INFO=INFO, drivetrain_configure_run=make("a")),
        fake_plugin("b", PLUGIN_INFO=INFO, drivetrain_configure_run=make("b", tryfirst=True)),
        fake_plugin("c", PLUGIN_INFO=INFO, drivetrain_configure_run=make("c")),
    )
    caller = manager.subset_caller("drivetrain_configure_run", active=["a", "b"])
    assert caller(run=None, accelerator=None) == ["b", "a"]
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


# ---------------------------------------------------------------- plugins that misbehave

def _registering(name, hook, *items, dist="someone-else", info=INFO):
    """A plugin whose registration hook ``hook`` returns ``items``."""
    def register():
        return list(items)

    register.__name__ = hook
    return fake_plugin(name, dist=dist, PLUGIN_INFO=info, **{hook: hookimpl(register)})


SHADOWS = [
    ("drivetrain_register_platforms", PlatformSpec(name="cpu", factory="drivetrain.platform:Platform", priority=999)),
    ("drivetrain_register_strategies", StrategySpec(name="ddp", automatic=True)),
    ("drivetrain_register_precisions", PrecisionSpec(name="bf16", priority=999)),
    ("drivetrain_register_trackers", TrackerSpec(name="TensorBoard", factory="json:dumps")),
    ("drivetrain_register_launchers", LauncherSpec(name="torchrun", factory="json:dumps", priority=999)),
    ("drivetrain_register_cluster_environments",
     ClusterEnvironmentSpec(name="slurm", factory="json:dumps", probe=lambda: Probe(True, "always"), priority=999)),
]


@pytest.mark.parametrize("hook, intruder", SHADOWS, ids=[hook.rsplit("_", 1)[1] for hook, _ in SHADOWS])
def test_a_third_party_plugin_cannot_take_a_built_in_name(hook, intruder):
    manager = load(*built_ins(), _registering("intruder", hook, intruder))
    record = manager.records["intruder"]
    assert record.status is PluginStatus.FAILED  # it offered nothing else
    assert "is taken by built-in plugin" in record.reason
    assert "pip uninstall someone-else" in record.reason
    assert "DRIVETRAIN_BLOCK_PLUGINS" not in record.reason  # never the fix: it would name a built-in
    assert all(plugin != "intruder" for plugin, _ in manager.registrations(hook))
    assert "intruder" not in manager.modules


def test_a_refused_item_leaves_the_plugins_other_items_usable():
    mine = TrackerSpec(name="mine", factory="json:dumps")
    manager = load(*built_ins(), _registering("mixed", "drivetrain_register_trackers",
                                              TrackerSpec(name="tensorboard", factory="json:dumps"), mine))
    record = manager.records["mixed"]
    assert record.status is PluginStatus.PARTIAL and record.usable
    assert "tracker 'tensorboard'" in record.reason and "built-in plugin 'tensorboard'" in record.reason
    trackers = [(p, s) for p, s in manager.registrations("drivetrain_register_trackers") if s.name in ("mine", "tensorboard")]
    assert trackers == [("tensorboard", trackers[0][1]), ("mixed", mine)]


def test_a_precision_backend_of_its_own_is_not_a_shadow():
    own = PrecisionSpec(name="bf16", backend="elsewhere")
    manager = load(*built_ins(), _registering("other_amp", "drivetrain_register_precisions", own))
    assert manager.records["other_amp"].status is PluginStatus.AVAILABLE
    assert ("other_amp", own) in manager.registrations("drivetrain_register_precisions")


def test_between_third_party_plugins_the_first_keeps_a_name():
    first = _registering("aaa", "drivetrain_register_trackers", TrackerSpec(name="same", factory="json:dumps"))
    second = _registering("bbb", "drivetrain_register_trackers", TrackerSpec(name="same", factory="json:loads"),
                          dist="bbb-dist")
    manager = load(second, first)
    assert [p for p, _ in manager.registrations("drivetrain_register_trackers")] == ["aaa"]
    reason = manager.records["bbb"].reason
    assert "taken by plugin 'aaa'" in reason and "pip uninstall bbb-dist" in reason


def test_duplicate_plugin_name_of_a_built_in_never_suggests_blocking_it():
    built_in = toy_platform("cpu")
    built_in.dist = FakeDist("drivetrain")
    manager = load(built_in, toy_platform("cpu"))
    duplicate = manager.records["cpu (someone-else)"]
    assert duplicate.status is PluginStatus.FAILED
    assert "already taken by a built-in plugin" in duplicate.reason
    assert "pip uninstall someone-else" in duplicate.reason
    assert "DRIVETRAIN_BLOCK_PLUGINS" not in duplicate.reason


@pytest.mark.parametrize("answer, expected", [
    (["not a spec", 42], ["'not a spec', which is not a TrackerSpec", "42, which is not a TrackerSpec"]),
    ("tensorboard", ["returned str 'tensorboard', not a list of TrackerSpec"]),
    ([TrackerSpec(name=7, factory="json:dumps")], ["name must be a non-empty string"]),
    ([TrackerSpec(name="x", factory="not a reference!")], ["factory must be a 'module:attribute' string"]),
    ([PlatformSpec(name="p", factory="json:dumps")], ["which is not a TrackerSpec"]),
])
def test_junk_from_a_registration_hook_is_refused_and_breaks_nothing_else(answer, expected):
    @hookimpl
    def drivetrain_register_trackers():
        return answer

    manager = load(*built_ins(), fake_plugin("junk", PLUGIN_INFO=INFO, drivetrain_register_trackers=drivetrain_register_trackers))
    record = manager.records["junk"]
    assert record.status is PluginStatus.FAILED and not record.usable
    assert all(text in record.reason for text in expected), record.reason
    assert any("junk" in message for message in manager.caught)
    names = [spec.name for _p, spec in manager.registrations("drivetrain_register_trackers")]
    assert "tensorboard" in names  # the built-in trackers are still there, and well formed
    from drivetrain.tracking import Trackers

    assert Trackers("tensorboard", logging_dir=".", manager=manager).names == ["tensorboard"]


def test_junk_fields_of_every_descriptor_kind_are_refused_one_by_one():
    good = PlatformSpec(name="fine", factory="drivetrain.platform:Platform")
    manager = load(_registering(
        "mixed", "drivetrain_register_platforms", good,
        PlatformSpec(name="p1", factory="drivetrain.platform:Platform", priority="high"),
        PlatformSpec(name="p2", factory="drivetrain.platform:Platform", probe="yes"),
        PlatformSpec(name="p3", factory="drivetrain.platform:Platform", precisions="bf16"),
    ))
    record = manager.records["mixed"]
    assert record.status is PluginStatus.PARTIAL
    assert manager.registrations("drivetrain_register_platforms") == [("mixed", good)]
    assert len(manager.refused("mixed")) == 3
    for text in ("priority must be an integer", "probe must be a callable", "precisions must be a list of strings"):
        assert text in record.reason


def test_many_broken_plugins_give_one_warning_and_details_at_debug_level(caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="drivetrain.plugin_manager")
    manager = load(failing_plugin("boom", ImportError("x")), failing_plugin("bang", RuntimeError("y")),
                   fake_plugin("noinfo"), _registering("junk", "drivetrain_register_trackers", 42), toy_platform())
    assert len(manager.caught) == 1
    summary = manager.caught[0]
    assert "4 plugin(s) skipped" in summary and "`drivetrain plugins list`" in summary
    assert all(name in summary for name in ("boom", "bang", "noinfo", "junk"))
    details = caplog.text
    assert "ImportError: x" in details and "RuntimeError: y" in details and "PLUGIN_INFO" in details


def test_children_of_a_launcher_keep_the_warnings_at_debug_level():
    manager = load(failing_plugin("boom", ImportError("x")), DRIVETRAIN_PLUGIN_PROBLEMS_REPORTED="1")
    assert manager.records["boom"].status is PluginStatus.FAILED
    assert manager.caught == []


def test_strict_mode_counts_refused_items_and_can_be_deferred():
    junk = _registering("junk", "drivetrain_register_trackers", TrackerSpec(name="ok", factory="json:dumps"), 42)
    with pytest.raises(PluginLoadError, match="junk"):
        load(junk, DRIVETRAIN_STRICT_PLUGINS="1")
    manager = PluginManager(env={"DRIVETRAIN_STRICT_PLUGINS": "1"}, entry_points=[junk])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager.load(strict=False)  # what `drivetrain plugins list` does: list first
    assert manager.records["junk"].status is PluginStatus.PARTIAL
    with pytest.raises(PluginLoadError, match="DRIVETRAIN_STRICT_PLUGINS=1"):
        manager.raise_if_strict()


def test_a_factory_that_cannot_be_imported_names_the_plugin_and_the_fix(tmp_path):
    from drivetrain.tracking import Trackers

    manager = load(_registering("ghosts", "drivetrain_register_trackers",
                                TrackerSpec(name="ghost", factory="drivetrain_no_such_module.tracker:Ghost"),
                                dist="drivetrain-ghosts"))
    trackers = Trackers("ghost", logging_dir=tmp_path, manager=manager)
    with pytest.raises(PluginSelectionError) as caught:
        trackers.init_trackers("demo")
    message = str(caught.value)
    assert "tracker 'ghost' of plugin 'ghosts' (drivetrain-ghosts)" in message
    assert "ModuleNotFoundError" in message and "pip install -U drivetrain-ghosts" in message
    assert "\n" not in message
    # chosen through log_with="all", it is left out instead
    quiet = Trackers("all", logging_dir=tmp_path, manager=manager)
    quiet.init_trackers("demo")
    assert "ghost" not in [t.name for t in quiet]
    quiet.end_training()


def test_an_unknown_name_to_block_warns_once_per_process():
    from drivetrain import plugin_manager

    plugin_manager._warned.clear()
    first = load(toy_platform(), DRIVETRAIN_BLOCK_PLUGINS="toy_typo,toy")
    second = load(toy_platform(), DRIVETRAIN_BLOCK_PLUGINS="toy_typo,toy")
    assert first.records["toy"].status is PluginStatus.BLOCKED
    assert [m for m in first.caught if "toy_typo" in m] == [
        "DRIVETRAIN_BLOCK_PLUGINS names 'toy_typo', but no installed plugin has that name (installed: toy)"
    ]
    assert second.caught == []


def test_contributed_name_tables_are_built_once_per_loaded_manager(monkeypatch):
    from drivetrain import plugin_manager
    from drivetrain.kernel import contributed

    asked = []
    manager = PluginManager(env={}).load()
    real = manager.registrations
    monkeypatch.setattr(manager, "registrations", lambda hook, **kw: asked.append(hook) or real(hook, **kw))
    monkeypatch.setattr(plugin_manager, "_default_manager", manager)
    first = contributed.plugin_public_name("DeepSpeedPlugin")
    assert first is not None
    for _ in range(3):
        assert contributed.plugin_public_name("DeepSpeedPlugin") == first
        contributed.module_public_names("utils")
    contributed.plugin_public_name("no_such_name_anywhere")
    assert sorted(asked) == ["drivetrain_fallback_names", "drivetrain_public_names"]  # each table once
    again = PluginManager(env={}).load()  # another manager (reset_plugin_manager): its own tables
    monkeypatch.setattr(plugin_manager, "_default_manager", again)
    assert contributed.plugin_public_name("DeepSpeedPlugin") == first
    assert contributed._tables["drivetrain_public_names"][0] is again
