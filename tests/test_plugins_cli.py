"""`drivetrain plugins ...` with real pip-installed plugin distributions: in this process (the `cli`
fixture discovers the plugins again on each call), in a fresh interpreter only where that is the point."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import ROOT
from local_devices import local_accelerator

SCHEMA = json.loads((ROOT / "docs" / "plugins-list.schema.json").read_text())


def listing(cli, *sites, env=None, detect=False):
    args = ["plugins", "list", "--json"] + (["--detect"] if detect else [])
    result = cli(*args, sites=sites, env=env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return {p["name"]: p for p in data["plugins"]}, data


def test_version(cli):
    result = cli("--version")
    assert result.returncode == 0 and re.fullmatch(r"drivetrain \d+\.\d+\.\d+\S*\n", result.stdout)


def test_list_shows_built_ins_in_a_table(cli):
    result = cli("plugins", "list")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "SOURCE", "KINDS", "VERSION", "NOTE"]
    assert any(row.split()[:4] == ["cpu", "available", "built-in", "platform"] for row in rows)


def test_list_does_not_import_torch_even_with_broken_plugins(template_site, broken_site):
    code = (
        "import sys, io, contextlib\n"
        "from drivetrain.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['plugins', 'list']) == 0\n"
        "heavy = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "print(heavy)\n"
    )
    import os
    import subprocess

    # the sites go before the path this process was given, which they must not replace
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(template_site), str(broken_site),
                                                       os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_built_in_command_imports_neither_the_other_commands_nor_the_plugins_commands():
    # `drivetrain plugins list` builds its own parser alone: no launch/config modules, and no
    # plugin command (the fsdp plugin's needs yaml), nor what only a launch needs, nor the
    # shutil that argparse imports for the terminal's width (which entry-point discovery's
    # importlib.metadata imports anyway from Python 3.12 on)
    code = (
        "import sys, io, contextlib, importlib.metadata\n"
        "already = set(sys.modules)\n"
        "from drivetrain.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['plugins', 'list']) == 0\n"
        "print(sorted(m for m in ('drivetrain.cli.launch_cmd', 'drivetrain.cli.config_cmd', 'yaml', "
        "'drivetrain_fsdp.commands', 'drivetrain.runtime.process_exits', 'shutil') if m in set(sys.modules) - already))\n"
    )
    import subprocess

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("columns", [None, "57", "0", "wide"])
def test_help_is_as_wide_as_argparse_makes_it(clean_env, columns):
    import argparse

    from drivetrain.cli.help_width import HelpFormatter
    from drivetrain.cli.main import build_parser

    if columns is None:
        clean_env.delenv("COLUMNS", raising=False)
    else:
        clean_env.setenv("COLUMNS", columns)
    assert HelpFormatter("drivetrain")._width == argparse.HelpFormatter("drivetrain")._width
    parser = build_parser()
    plugins = parser._subparsers._group_actions[0].choices["plugins"]
    assert parser.formatter_class is HelpFormatter and plugins.formatter_class is HelpFormatter


def test_help_still_lists_every_command_and_the_plugins_commands(cli):
    result = cli("--help")
    assert result.returncode == 0, result.stderr
    for command in ("plugins", "launch", "config", "env", "merge-weights", "to-fsdp2"):
        assert re.search(rf"^\s+{command}\b", result.stdout, re.M), command


def test_template_plugin_is_listed_as_third_party(cli, template_site):
    plugins, _ = listing(cli, template_site)
    jsonl = plugins["jsonl"]
    assert (jsonl["source"], jsonl["status"], jsonl["kinds"]) == ("third-party", "available", ["tracker"])
    assert jsonl["distribution"] == "drivetrain-toyaccel" and jsonl["version"] == "0.1.0"
    assert plugins["cpu"]["status"] == "available"


def test_broken_plugins_are_reported_and_the_rest_works(cli, template_site, broken_site):
    result = cli("plugins", "list", sites=(template_site, broken_site))
    assert result.returncode == 0
    # one line for all of them, naming each and where to look; the details are in the table
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "PluginWarning" in result.stderr and "`drivetrain plugins list` shows why" in result.stderr
    for name in ("broken_import", "bad_signature", "future_api", "junk_registration", "shadow_builtin",
                 "float_api", "bad_info"):
        assert name in result.stderr
    plugins, _ = listing(cli, template_site, broken_site)
    assert plugins["broken_import"]["status"] == "failed"
    assert "RuntimeError: this plugin is broken on purpose" in plugins["broken_import"]["reason"]
    assert plugins["bad_signature"]["status"] == "failed"
    assert "colour" in plugins["bad_signature"]["reason"]
    assert plugins["future_api"]["status"] == "failed"
    assert "needs plugin API 3.0" in plugins["future_api"]["reason"]
    # wrong types in PluginInfo refuse that plugin alone, with the field named
    assert plugins["float_api"]["status"] == "failed"
    assert "plugin API version 1.5 (float)" in plugins["float_api"]["reason"]
    assert plugins["bad_info"]["status"] == "failed"
    assert "requires='torch', which is not a list of strings" in plugins["bad_info"]["reason"]
    assert plugins["jsonl"]["status"] == "available" and plugins["cpu"]["status"] == "available"
    junk = plugins["junk_registration"]
    assert junk["status"] == "failed" and "'not a spec', which is not a TrackerSpec" in junk["reason"]
    shadow = plugins["shadow_builtin"]  # its cpu platform is refused, its own tracker kept
    assert shadow["status"] == "partial" and shadow["kinds"] == ["tracker"]
    assert "platform 'cpu': the name 'cpu' is taken by built-in plugin 'cpu'" in shadow["reason"]
    assert "pip uninstall drivetrain-shadow-builtin" in shadow["reason"]
    duplicate = plugins["cpu (drivetrain-shadow-builtin)"]
    assert duplicate["status"] == "failed" and "pip uninstall drivetrain-shadow-builtin" in duplicate["reason"]
    assert all("DRIVETRAIN_BLOCK_PLUGINS=cpu" not in p["reason"] for p in plugins.values())


def test_detect_picks_this_machines_platform_and_shows_every_probe(cli, broken_site):
    plugins, data = listing(cli, broken_site, detect=True)
    assert data["detection"]["platform"] == local_accelerator()
    assert plugins[local_accelerator()]["status"] == "active"
    # the built-in's platform: a third-party 'cpu' with priority 999 takes no part
    assert [c["plugin"] for c in data["detection"]["candidates"] if c["name"] == "cpu"] == ["cpu"]
    cpu = [c for c in data["detection"]["candidates"] if c["name"] == "cpu"][0]
    assert cpu["available"] and cpu["reason"]
    # a refused plugin's platform never takes part, whatever priority it claims
    assert all(c["name"] != "future" for c in data["detection"]["candidates"])
    table = cli("plugins", "list", "--detect").stdout
    assert f"platform: {local_accelerator()}" in table


def test_block_and_autoload_controls_on_the_command_line(cli, template_site, broken_site):
    plugins, _ = listing(cli, template_site, broken_site, env={"DRIVETRAIN_BLOCK_PLUGINS": "broken_import,jsonl"})
    assert plugins["broken_import"]["status"] == "blocked"
    assert plugins["jsonl"]["status"] == "blocked"
    plugins, _ = listing(cli, template_site, broken_site, env={"DRIVETRAIN_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert {plugins[n]["status"] for n in ("jsonl", "broken_import", "bad_signature", "future_api")} == {"disabled"}
    assert plugins["cpu"]["status"] == "available"


def test_strict_mode_lists_everything_then_fails_without_a_traceback(cli, broken_site):
    strict = {"DRIVETRAIN_STRICT_PLUGINS": "1"}
    result = cli("plugins", "list", sites=(broken_site,), env=strict)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "DRIVETRAIN_STRICT_PLUGINS=1" in result.stderr and "broken_import" in result.stderr
    for name, status in (("cpu", "available"), ("broken_import", "failed"), ("shadow_builtin", "partial")):
        assert re.search(rf"^{name}\s+{status}\s", result.stdout, re.M), result.stdout
    as_json = cli("plugins", "list", "--json", sites=(broken_site,), env=strict)
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["plugins"]
    other = cli("env", sites=(broken_site,), env=strict)  # any other command: one error line
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert "drivetrain: error:" in other.stderr and "DRIVETRAIN_STRICT_PLUGINS=1" in other.stderr


def test_a_plain_run_ignores_misbehaving_plugins(broken_site, with_sites, fresh_state, monkeypatch, tmp_path):
    """Shadowing names, junk registrations and a tracker that cannot be imported, in one process."""
    import warnings

    from drivetrain import Accelerator, plugin_manager
    from drivetrain.errors import PluginSelectionError

    with_sites(broken_site)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager = plugin_manager.PluginManager().load()
    assert len(caught) == 1
    monkeypatch.setattr(plugin_manager, "_default_manager", manager)
    accelerator = Accelerator(log_with="tensorboard", project_dir=tmp_path)
    assert accelerator.state.run.selection.platform_plugin == local_accelerator()
    assert manager.records["cpu"].source == "built-in"
    accelerator.init_trackers("probe")
    assert [t.name for t in accelerator.trackers] == ["tensorboard"]
    accelerator.get_tracker("tensorboard").finish()
    ghost = Accelerator(log_with="ghost", project_dir=tmp_path)
    with pytest.raises(PluginSelectionError, match=r"tracker 'ghost' of plugin 'missing_factory' .*"
                                                   r"ModuleNotFoundError.*pip install -U drivetrain-missing-factory"):
        ghost.init_trackers("probe")


def test_a_multi_process_run_without_its_collective_backend_stops_before_starting(cli, monkeypatch):
    import subprocess

    from launching import SCRIPTS

    def refuse(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    result = cli("launch", "--cpu", "--num-processes", "2", str(SCRIPTS / "check_operations.py"),
                 env={"DRIVETRAIN_BLOCK_PLUGINS": "torch_distributed"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "drivetrain: error: 2 processes on platform 'cpu' need plugin 'torch_distributed' to connect them, but it is "
        "blocked by DRIVETRAIN_BLOCK_PLUGINS: remove 'torch_distributed' from DRIVETRAIN_BLOCK_PLUGINS, or run one "
        "process"
    )
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_info_shows_one_plugin(cli, template_site):
    result = cli("plugins", "info", "jsonl", "--json", sites=(template_site,))
    data = json.loads(result.stdout)
    assert data["provides"] == {"drivetrain_register_trackers": ["jsonl"]}
    assert data["source"] == "third-party"
    text = cli("plugins", "info", "cpu").stdout
    assert re.search(r"^status:\s+available$", text, re.M)
    missing = cli("plugins", "info", "nope")
    assert missing.returncode == 2 and "no plugin named 'nope'" in missing.stdout


def test_info_names_config_sections_and_contributed_names_readably(cli):
    cuda = json.loads(cli("plugins", "info", "cuda", "--json").stdout)["provides"]
    assert cuda["drivetrain_register_config_sections"] == ["top-level gpu_ids/enable_cpu_affinity"]
    assert "utils.environment.override_numa_affinity" in cuda["drivetrain_public_names"]
    xla = json.loads(cli("plugins", "info", "xla", "--json").stdout)["provides"]
    assert xla["drivetrain_enum_members"] == ["DistributedType.XLA", "RNGType.XLA"]
    text = cli("plugins", "info", "ipex").stdout
    provides = re.search(r"^provides:\s+(.*)$", text, re.M).group(1)
    assert provides.startswith("register_config_sections: ipex_config; public_names: utils.is_ipex_available")
    assert "ConfigSection(" not in provides and "('" not in provides  # no descriptor or pair reprs


def test_template_tracker_writes_through_the_registry(template_site, with_sites, tmp_path):
    with_sites(template_site)
    from drivetrain.plugin_api import resolve
    from drivetrain.plugin_manager import PluginManager

    manager = PluginManager(env={}).load()
    spec = dict((s.name, s) for _, s in manager.registrations("drivetrain_register_trackers"))["jsonl"]
    tracker = resolve(spec.factory)("demo", logging_dir=tmp_path)
    tracker.start()
    tracker.store_init_configuration({"lr": 0.1})
    tracker.log({"loss": 1.5}, step=3)
    tracker.finish()
    lines = (tmp_path / "demo" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["values"] == {"loss": 1.5} and json.loads(lines[0])["step"] == 3
    assert json.loads((tmp_path / "demo" / "config.json").read_text()) == {"lr": 0.1}


BACKEND_LIBRARIES = (
    "deepspeed", "torch_xla", "transformer_engine", "megatron", "msamp", "intel_extension_for_pytorch",
    "wandb", "mlflow", "comet_ml", "aim", "clearml", "dvclive", "trackio", "swanlab", "tensorboard",
    "torchao", "tensorboardX", "habana_frameworks", "torch_npu", "torch_mlu",
)
BACKEND_WORDS = ("fsdp", "deepspeed", "megatron", "xla", "nccl", "cuda", "mps", "xpu", "ipex", "fp8")


def _is_backend_argument(node):
    """A parameter annotated ``BackendArgument``: Accelerate's name for a backend object, which
    rule 8 of the design lets the facade's signatures carry so positional calls land right."""
    import ast

    annotation = node.annotation
    return isinstance(annotation, ast.Name) and annotation.id == "BackendArgument"


def _code_words(tree):
    """Identifiers (parameters and definitions included) and string literals of a module,
    docstrings excluded (they may give examples)."""
    import ast

    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value
        elif isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, ast.arg) and not _is_backend_argument(node):
            yield node.lineno, node.arg
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.lineno, node.name
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                yield node.lineno, alias.name
            if isinstance(node, ast.ImportFrom) and node.module:
                yield node.lineno, node.module


def test_core_names_no_backend():
    """Rule 1 of the design: the core's code names no backend library, device or strategy."""
    import ast

    offences = []
    library = re.compile(r"^(" + "|".join(BACKEND_LIBRARIES) + r")\b")
    word = re.compile(r"(?<![a-z])(" + "|".join(BACKEND_WORDS) + r")(?![a-z])", re.I)
    for path in sorted((ROOT / "core").rglob("*.py")):
        for number, text in _code_words(ast.parse(path.read_text())):
            if library.search(text) or word.search(text):
                offences.append(f"{path.relative_to(ROOT)}:{number}: {text!r}")
    assert offences == [], "core/ names a backend:\n" + "\n".join(offences)
