"""The plugin API is the only part of drivetrain a plugin imports, built-in or third-party."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import drivetrain.plugin_api as api

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_ROOTS = [ROOT / "plugins", ROOT / "examples" / "plugin_template"]
API = "drivetrain.plugin_api"
# A lazy reference ("module:attribute") to a core module would be an import in disguise.
LAZY_REF = re.compile(r"^drivetrain(\.\w+)+:\w")

#: Imports of one plugin's package by another that stay, each with its reason. Otherwise a plugin
#: reaches another only through hooks, the run and the names plugins contribute (``contributed``).
ALLOWED_CROSS_PLUGIN: dict[tuple[str, str], str] = {}


def _packages() -> dict[str, Path]:
    """Every plugin package (built-in and the template's) by its import name."""
    found = {}
    for root in PLUGIN_ROOTS:
        for init in root.glob("drivetrain_*/__init__.py"):
            found[init.parent.name] = init.parent
    return found


def _modules() -> list[tuple[str, Path]]:
    return [(name, path) for name, package in sorted(_packages().items())
            for path in sorted(package.rglob("*.py"))]


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "drivetrain":  # `from drivetrain import x` imports drivetrain.x
                found += [(node.lineno, f"drivetrain.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def test_the_scan_sees_every_plugin():
    packages = _packages()
    assert {"drivetrain_cpu", "drivetrain_deepspeed", "drivetrain_fsdp", "drivetrain_jsonl"} <= set(packages)
    assert len(_modules()) > 3 * len(packages) // 2


def test_plugins_import_only_the_plugin_api():
    packages = set(_packages())
    problems = []
    for own, path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(ROOT)
        for line, module in _imported_modules(tree):
            top = module.split(".")[0]
            if top == "drivetrain" and module != API and not module.startswith(API + "."):
                problems.append(f"{where}:{line} imports {module}: import it from {API}, or add it there")
            elif top in packages and top != own and (own, top) not in ALLOWED_CROSS_PLUGIN:
                problems.append(f"{where}:{line} imports the plugin {top}: reach it through a hook or a public name")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and LAZY_REF.match(node.value)
                    and not node.value.startswith(API)):
                problems.append(f"{where}:{node.lineno} refers to {node.value!r}: name it through {API}")
    assert not problems, "\n".join(problems)


def test_allowed_cross_plugin_imports_are_still_needed():
    # An exception nobody needs any more must go, or the list hides the next one.
    for (own, other), reason in ALLOWED_CROSS_PLUGIN.items():
        assert reason
        sources = "".join(p.read_text() for p in _packages()[own].rglob("*.py"))
        assert re.search(rf"^\s*(from|import) {other}\b", sources, re.M), (own, other)


@pytest.mark.parametrize("submodule", sorted({*api._LAZY_BY_MODULE, "descriptors", "errors", "environment"}))
def test_every_name_of_a_submodule_is_offered_by_the_package(submodule):
    module = importlib.import_module(f"{API}.{submodule}")
    if submodule == "environment":  # read with its module's name: `environment.read_pair(...)`
        assert all(callable(getattr(module, n)) or isinstance(getattr(module, n), str) for n in module.__all__)
        return
    for name in module.__all__:
        assert getattr(api, name) is getattr(module, name), name
    assert set(api._LAZY_BY_MODULE.get(submodule, ())) <= set(module.__all__)


def test_importing_the_plugin_api_imports_no_torch():
    code = ("import sys, drivetrain.plugin_api as api, drivetrain.plugin_api.environment, "
            "drivetrain.plugin_api.options, drivetrain.plugin_api.probes, drivetrain.plugin_api.cluster, "
            "drivetrain.plugin_api.tracking, drivetrain.plugin_api.launching; "
            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_helper"):
        api.no_such_helper  # noqa: B018


def test_contributed_reaches_another_plugins_name_or_the_default():
    # The cuda plugin contributes this probe; a plugin asks for it without importing drivetrain_cuda.
    check = api.contributed("utils.check_cuda_fp8_capability", None)
    assert check is None or isinstance(check(), bool)
    marker = object()
    assert api.contributed("utils.no_plugin_contributes_this", marker) is marker
    with pytest.raises(AttributeError):
        api.contributed("utils.no_plugin_contributes_this")


# ------------------------------------------------------------------------------ role objects

class _Conducting(api.Strategy):
    """A strategy's role object: its step methods are the run's, its run hooks answer only
    through the run that built it."""

    built = 0

    def __init__(self, run, arguments=None):
        super().__init__(run, arguments)
        type(self).built += 1

    def no_sync(self, model):
        return ("conducting", self.run.selection.strategy.name)

    @api.hookimpl(tryfirst=True)
    def drivetrain_wrap_model(self, model, run, evaluation_mode):
        return ("conducting", run.selection.strategy.name)


def _multi_role_manager(role_object):
    import warnings

    from fake_plugins import fake_plugin

    from importlib import metadata as importlib_metadata
    from drivetrain.plugin_manager import PluginManager

    @api.hookimpl
    def drivetrain_register_strategies():
        return [api.StrategySpec(name="conduct", hooks=role_object), api.StrategySpec(name="plain")]

    @api.hookimpl
    def drivetrain_unwrap_model(model, run, keep_fp32_wrapper):
        return "module-level hooks answer whichever strategy is chosen"

    plugin = fake_plugin("multi", PLUGIN_INFO=api.PluginInfo(api_version="2.0"),
                         drivetrain_register_strategies=drivetrain_register_strategies,
                         drivetrain_unwrap_model=drivetrain_unwrap_model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entry_points = [*importlib_metadata.entry_points(group="drivetrain.plugins"), plugin]
        return PluginManager(env={}, entry_points=entry_points).load()


def _run(manager, strategy):
    from drivetrain.cluster import ClusterEnvironment
    from drivetrain.run import Run
    from drivetrain.selection.choice import Requests, select

    selection = select(manager, Requests(strategy=strategy), cluster=ClusterEnvironment(name="test"))
    return Run(manager, selection, platform=None)


def test_a_runs_strategy_and_precision_are_its_typed_attributes_and_answer_only_through_it():
    import gc

    from drivetrain.selection.choice import Requests, select

    _Conducting.built = 0
    manager = _multi_role_manager(_Conducting)
    run = _run(manager, "conduct")
    assert isinstance(run.strategy, _Conducting) and run.strategy.run is run
    assert type(run.precision) is api.Precision and run.precision.name == "no"  # full precision: the base class
    assert run.strategy.no_sync(None) == ("conducting", "conduct")  # the step: a direct call
    assert run.call("drivetrain_wrap_model", model=None, evaluation_mode=False) == ("conducting", "conduct")
    assert "drivetrain_wrap_model" in manager.records["multi"].hooks
    # The same plugin, active through another strategy of its own: the module answers, the role does not.
    other = _run(manager, "plain")
    assert "multi" in other.active_plugins and type(other.strategy) is api.Strategy
    assert other.call("drivetrain_wrap_model", model=None, evaluation_mode=False) is None
    assert other.call("drivetrain_unwrap_model", model=None, keep_fp32_wrapper=True) is not None
    # A new AcceleratorState's run chooses again and builds its own object; the old run ends.
    following = other.successor(select(manager, Requests(strategy="conduct"), cluster=run.selection.cluster), {},
                                accelerator_state=None)
    assert _Conducting.built == 2 and following.strategy is not run.strategy
    assert following.call("drivetrain_wrap_model", model=None, evaluation_mode=False) == ("conducting", "conduct")
    # A run that ends, or is gone, takes its role object's hooks with it.
    (key,) = run._registered
    run.close()
    assert manager.hooks.get_plugin(key) is None
    (key,) = following._registered
    del following
    gc.collect()
    assert manager.hooks.get_plugin(key) is None


class _RefusesBf16(api.Strategy):
    def own_precision(self, precision):
        if precision.name == "bf16":
            raise api.ConfigError("this strategy cannot run bf16; use fp16")
        return precision


def test_a_strategy_owns_or_refuses_the_runs_precision_when_the_run_is_built():
    from drivetrain.cluster import ClusterEnvironment
    from drivetrain.run import Run
    from drivetrain.selection.choice import Requests, select

    manager = _multi_role_manager(_RefusesBf16)

    def run_with(precision):
        selection = select(manager, Requests(strategy="conduct", mixed_precision=precision),
                           cluster=ClusterEnvironment(name="test"))
        return Run(manager, selection, platform=None)

    with pytest.raises(api.ConfigError, match="cannot run bf16; use fp16"):
        run_with("bf16")
    run = run_with("fp16")
    assert run.precision.name == "fp16" and run.precision.run is run  # kept as the precision plugin built it


class _RegistersThings(api.Strategy):
    @api.hookimpl
    def drivetrain_register_trackers(self):
        return []


class _WrongSignature(api.Strategy):
    @api.hookimpl
    def drivetrain_wrap_model(self, run, colour):
        return None


class _NotAStrategy:
    @api.hookimpl
    def drivetrain_wrap_model(self, model, run, evaluation_mode):
        return None


@pytest.mark.parametrize("role_object, reason", [
    (_RegistersThings, "'drivetrain_register_trackers' is not a run hook"),
    (_WrongSignature, "bad hook implementation"),
    (_NotAStrategy, "not a subclass of drivetrain.plugin_api.Strategy"),
    ("no_such_module_here:Strategy", "cannot be loaded: 'no_such_module_here:Strategy' failed with ModuleNotFoundError"),
])
def test_a_broken_role_object_is_refused_when_chosen_naming_the_plugin(role_object, reason):
    manager = _multi_role_manager(role_object)
    assert manager.records["multi"].usable  # nothing of the role is imported before it is chosen
    with pytest.raises(api.PluginSelectionError, match=r"plugin 'multi'") as caught:
        _run(manager, "conduct")
    assert reason in str(caught.value)
    _run(manager, "plain")  # the plugin's other strategy still works


def test_deepspeed_strategy_hooks_live_on_its_role_object():
    # The plugin is also a launcher and a cluster environment: none of its module-level run
    # hooks may act as the strategy.
    import drivetrain_deepspeed.plugin as module
    from drivetrain_deepspeed.strategy import DeepSpeedStrategy

    (spec,) = module.drivetrain_register_strategies()
    assert api.resolve(spec.hooks) is DeepSpeedStrategy
    run_hooks = {name for name in dir(module) if name.startswith("drivetrain_") and "run" in
                 getattr(module, name).__code__.co_varnames[:getattr(module, name).__code__.co_argcount]}
    assert run_hooks == {"drivetrain_unwrap_model"}
    # `plugins info` says where the role's hooks live, without importing them.
    info = subprocess.run([sys.executable, "-m", "drivetrain", "plugins", "info", "deepspeed", "--json"],
                          capture_output=True, text=True, check=True).stdout
    assert json.loads(info)["role_classes"] == {"deepspeed": ["drivetrain_deepspeed.strategy:DeepSpeedStrategy"]}


def test_every_built_in_strategy_is_one_role_object_and_its_module_has_no_run_hooks():
    # One shape for every strategy: run hooks and the run's state on the class `hooks` names,
    # built for each run; nothing a module-level hook would have to guard with the run's choice.
    from drivetrain.plugin_manager import get_plugin_manager

    manager = get_plugin_manager()
    built_in = {plugin: spec for plugin, spec in manager.registrations("drivetrain_register_strategies")
                if manager.records[plugin].source == "built-in"}
    assert {spec.name for spec in built_in.values()} >= {"ddp", "fsdp", "parallelism_config", "deepspeed",
                                                        "megatron_lm"}
    for plugin, spec in built_in.items():
        assert issubclass(api.resolve(spec.hooks), api.Strategy), spec.name
        module = manager.modules[plugin]
        run_hooks = {name for name in dir(module) if name.startswith("drivetrain_") and "run" in
                     getattr(module, name).__code__.co_varnames[:getattr(module, name).__code__.co_argcount]}
        # DeepSpeed's module also serves its launcher and cluster environment: an engine unwraps whatever the strategy
        assert run_hooks <= {"drivetrain_unwrap_model"}, (plugin, run_hooks)
    # Every built-in precision's step is a Precision subclass (run.precision), none a module hook.
    for plugin, spec in manager.registrations("drivetrain_register_precisions"):
        if manager.records[plugin].source == "built-in":
            assert spec.hooks is not None and issubclass(api.resolve(spec.hooks), api.Precision), (plugin, spec.name)


def test_descriptors_are_frozen_dataclasses_with_shared_methods():
    """The descriptors and the cluster environment behave as ``@dataclass(frozen=True)``
    classes do (their methods come from FrozenRecord instead of being generated)."""
    import copy
    import dataclasses
    import pickle

    from drivetrain.kernel.cluster import ClusterEnvironment
    from drivetrain.plugin_api import ConfigError, PlatformSpec, PluginInfo, Probe

    info = PluginInfo("1.0", requires=("a>=1",))
    assert dataclasses.is_dataclass(info) and [f.name for f in dataclasses.fields(PluginInfo)][:3] == [
        "api_version", "description", "requires"]
    assert info == PluginInfo("1.0", requires=("a>=1",)) != PluginInfo("1.1", requires=("a>=1",))
    assert hash(info) == hash(PluginInfo("1.0", requires=("a>=1",)))
    assert repr(info) == ("PluginInfo(api_version='1.0', description='', requires=('a>=1',), extra=None, "
                          "install_hint=None, features=())")
    assert dataclasses.replace(info, extra="x").extra == "x" and dataclasses.asdict(info)["api_version"] == "1.0"
    assert pickle.loads(pickle.dumps(info)) == info == copy.deepcopy(info)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.description = "changed"
    assert Probe(True, "yes").details == {} and Probe(True, "yes").details is not Probe(True, "yes").details
    spec = PlatformSpec("p", "m:f", priority=3)
    assert (spec.name, spec.factory, spec.priority, spec.probe().available) == ("p", "m:f", 3, True)
    for make, message in ((lambda: PlatformSpec(), "missing 1 required argument: 'name'"),
                          (lambda: PlatformSpec("p", "m:f", nope=1), "unexpected keyword argument 'nope'"),
                          (lambda: PlatformSpec("p", "m:f", name="q"), "multiple values for argument 'name'"),
                          (lambda: Probe(True, "r", {}, 4), "takes 3 positional arguments but 4 were given")):
        with pytest.raises(TypeError, match=re.escape(message)):
            make()
    with pytest.raises(ConfigError, match="rank 5 is outside 0..1"):  # __post_init__ still runs
        ClusterEnvironment(name="t", world_size=2, rank=5)

    @dataclasses.dataclass(frozen=True)
    class Scheduler(ClusterEnvironment):  # a plugin's own frozen subclass is accepted
        queue: str = "default"

    assert Scheduler(name="s", queue="gpu").queue == "gpu"
    with pytest.raises(TypeError, match="non-frozen"):
        @dataclasses.dataclass
        class Mutable(ClusterEnvironment):
            queue: str = "default"
