"""The hook specifications as a contract: documented completely, and every hook exercised.

Each spec says, for a plugin author who reads nothing else: every argument (``:param:``),
what the return value means (``:return:``), its calling convention and the plugin API
version it arrived in, on one line (``Run hook, *firstresult*, API 1.0.``).
"""

from __future__ import annotations

import inspect
import re
import warnings
from pathlib import Path

import pytest
from fake_plugins import fake_plugin
from packaging.version import Version

from drivetrain import hookspecs, plugin_manager
from drivetrain.kernel import roles
from drivetrain.errors import PluginWarning
from drivetrain.plugin_api import PluginInfo, hookimpl
from importlib import metadata as importlib_metadata
from drivetrain.plugin_manager import PluginManager, PluginStatus
from drivetrain.version import PLUGIN_API_VERSION

CONVENTION = re.compile(r"^\s*(Registration|Command-line|Run) hook, \*(firstresult|collected|broadcast)\*, "
                        r"API (\d+\.\d+)\.$", re.MULTILINE)
SPECS = sorted(name for name in dir(hookspecs) if name.startswith("drivetrain_"))


def test_there_are_specs_to_check():
    assert len(SPECS) >= 30
    assert all(hasattr(getattr(hookspecs, name), "drivetrain_spec") for name in SPECS)


ROLE_METHODS = [(role, name) for role in ("Strategy", "Precision")
                for name, member in vars(getattr(roles, role)).items()
                if callable(member) and not name.startswith("_")]


@pytest.mark.parametrize("role, name", ROLE_METHODS)
def test_every_role_method_the_core_calls_directly_is_documented_and_typed(role, name):
    # the step's methods replaced hooks: they are held to what a spec says (purpose, answer, types)
    function = getattr(getattr(roles, role), name)
    doc = inspect.getdoc(function) or ""
    assert len(doc) > 40, f"{role}.{name}: say what it is for and what its answer means"
    signature = inspect.signature(function)
    assert signature.return_annotation is not inspect.Signature.empty, f"{role}.{name}: no return annotation"
    assert all(p.annotation is not inspect.Parameter.empty for n, p in signature.parameters.items() if n != "self")


def test_no_hook_is_chained_and_the_step_is_no_hook():
    # the per-step path calls the run's role objects; pluggy is not on it
    step = {"drivetrain_backward", "drivetrain_autocast", "drivetrain_make_grad_scaler", "drivetrain_no_sync",
            "drivetrain_sync_in_backward", "drivetrain_clip_grad_norm", "drivetrain_clip_grad_value",
            "drivetrain_convert_model", "drivetrain_wrap_dataloader"}
    assert not step & set(SPECS)
    assert "*chained*" not in (hookspecs.__doc__ or "")
    assert set(ROLE_METHODS) >= {("Strategy", "backward"), ("Strategy", "own_precision"), ("Precision", "autocast"),
                                 ("Precision", "convert_model"), ("Strategy", "no_sync")}


@pytest.mark.parametrize("name", SPECS)
def test_every_spec_documents_arguments_return_convention_and_version(name):
    function = getattr(hookspecs, name)
    doc = inspect.getdoc(function) or ""
    arguments = list(inspect.signature(function).parameters)
    documented = re.findall(r"^:param (\w+):", doc, re.MULTILINE)
    assert documented == arguments, f"{name}: :param lines {documented} do not match the arguments {arguments}"
    assert re.search(r"^:return: \S", doc, re.MULTILINE), f"{name}: no ':return:' saying what the answer means"
    conventions = CONVENTION.findall(doc)
    assert len(conventions) == 1, f"{name}: needs one line 'Run hook, *firstresult*, API 1.0.' (found {conventions})"
    kind, mode, version = conventions[0]
    assert (kind == "Run") == ("run" in arguments), f"{name}: a run hook is one that takes `run`"
    firstresult = bool(function.drivetrain_spec.get("firstresult"))
    assert (mode == "firstresult") == firstresult, f"{name}: says *{mode}* but firstresult={firstresult}"
    assert Version(version) <= Version(PLUGIN_API_VERSION), f"{name}: arrived in API {version}, newer than the core"
    signature = inspect.signature(function)
    assert signature.return_annotation is not inspect.Signature.empty, f"{name}: no return annotation"
    assert all(p.annotation is not inspect.Parameter.empty for p in signature.parameters.values()), name
    for argument, parameter in signature.parameters.items():
        if parameter.annotation == "Any":
            text = doc.split(f":param {argument}:", 1)[1].split("\n:", 1)[0]
            assert "Any" in text or "any" in text, f"{name}: {argument} is `Any`; say why anything goes"


def test_the_broadcast_hooks_are_the_ones_whose_answer_is_ignored():
    for name in SPECS:
        doc = inspect.getdoc(getattr(hookspecs, name))
        broadcast = CONVENTION.search(doc).group(2) == "broadcast"
        assert broadcast == doc.split(":return:", 1)[1].lstrip().startswith("Ignored"), name


def _manager_with(*fakes):
    entry_points = [*importlib_metadata.entry_points(group="drivetrain.plugins"), *fakes]
    return PluginManager(env={}, entry_points=entry_points)


def test_a_plugin_implementing_a_deprecated_hook_loads_is_heard_and_is_told_what_to_do_instead():
    assert set(hookspecs.DEPRECATED_HOOKS) <= set(SPECS)

    @hookimpl
    def drivetrain_distributed_types():
        return ["MULTI_OLDACCEL"]

    fake = fake_plugin("oldaccel", PLUGIN_INFO=PluginInfo(api_version="2.0"),
                       drivetrain_distributed_types=drivetrain_distributed_types)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager = _manager_with(fake).load()
    assert manager.records["oldaccel"].status is PluginStatus.AVAILABLE
    assert ("oldaccel", "MULTI_OLDACCEL") in list(manager.registrations("drivetrain_distributed_types"))
    messages = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
    assert any("'oldaccel'" in m and "implements drivetrain_distributed_types, which is deprecated" in m
               and "PlatformSpec.multi_process_type" in m for m in messages), messages


def test_no_built_in_plugin_or_the_template_implements_a_deprecated_hook():
    root = Path(__file__).resolve().parents[1]
    sources = [*root.glob("plugins/drivetrain_*/**/*.py"), *root.glob("examples/plugin_template/**/*.py")]
    for hook in hookspecs.DEPRECATED_HOOKS:
        assert not [str(p) for p in sources if f"def {hook}(" in p.read_text()]


def test_on_checkpoint_tells_an_active_plugin_of_each_save_and_load_and_a_raising_one_costs_nothing(
        fresh_state, tmp_path, monkeypatch, caplog):
    import torch

    from drivetrain import Accelerator

    heard = []

    @hookimpl(tryfirst=True)  # before the raising one: an exception ends that notice's call
    def drivetrain_on_checkpoint(event, directory, run):
        heard.append((event, Path(directory).name, (Path(directory) / "manifest.json").is_file()))

    @hookimpl
    def raising(event, directory):
        raise OSError("the listener's disk is full")

    listener = fake_plugin("listener", PLUGIN_INFO=PluginInfo(api_version="2.0", features=["listener"]),
                           drivetrain_on_checkpoint=drivetrain_on_checkpoint)
    raiser = fake_plugin("raiser", PLUGIN_INFO=PluginInfo(api_version="2.0", features=["raiser"]),
                         drivetrain_on_checkpoint=raising)
    monkeypatch.setattr(plugin_manager, "_default_manager", _manager_with(listener, raiser).load())
    monkeypatch.setenv("DRIVETRAIN_USE_LISTENER", "1")
    monkeypatch.setenv("DRIVETRAIN_USE_RAISER", "1")
    monkeypatch.setenv("DRIVETRAIN_CHECKPOINT_BACKGROUND", "0")  # in place when save_state returns
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    saved = accelerator.save_state(tmp_path / "ckpt")
    assert heard == [("save", "ckpt", True)]
    with torch.no_grad():
        model.weight.zero_()
    assert accelerator.load_state(saved) == saved
    assert heard == [("save", "ckpt", True), ("load", "ckpt", True)]
    assert torch.count_nonzero(model.weight)  # restored although a plugin raised on each notice
    failures = [r.getMessage() for r in caplog.records if "failed on checkpoint" in r.getMessage()]
    assert len(failures) == 2 and all("'raiser'" in m and "OSError: the listener's disk is full" in m
                                      for m in failures), failures


def test_every_annotation_names_a_real_type():
    """The names imported for type checkers only exist and every annotation resolves."""
    import ast
    import typing

    for name in SPECS:
        function = getattr(hookspecs, name)
        module = inspect.getmodule(function)
        namespace = dict(vars(module))
        tree = ast.parse(inspect.getsource(module))
        for node in tree.body:
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                block = ast.Module(body=node.body, type_ignores=[])
                exec(compile(block, module.__file__, "exec"), namespace)  # noqa: S102 - our own imports, relative
        typing.get_type_hints(function, globalns=namespace)
