"""Every public name of Accelerate is importable from drivetrain at the same path.

The names come from ``tests/data/accelerate-public-names.txt`` (Accelerate 1.15, module by
module). ``LATER`` lists the names deliberately left to a later issue, each with the issue
that brings it; when a name arrives, remove it from ``LATER`` (the test fails while a name
listed there is already importable, so the list cannot go stale).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

NAMES_FILE = Path(__file__).parent / "data" / "accelerate-public-names.txt"

#: "module:name" -> the issue that brings it.
LATER: dict[str, str] = {}


def _accelerate_names() -> list[tuple[str, str]]:
    pairs, module = [], None
    for line in NAMES_FILE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        header = re.match(r"\[(\S+)\]", line)
        if header:
            module = header.group(1)
            continue
        pairs.extend((module, name) for name in line.split())
    return pairs


NAMES = _accelerate_names()


def _importable(module: str, name: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def test_the_names_file_is_read():
    modules = {module for module, _name in NAMES}
    assert len(NAMES) > 350 and {"drivetrain", "drivetrain.utils", "drivetrain.tracking"} <= modules


def test_every_accelerate_name_is_importable_at_its_path():
    missing = [f"{m}:{n}" for m, n in NAMES if f"{m}:{n}" not in LATER and not _importable(m, n)]
    assert missing == [], "not importable (add the name, or list it in LATER with its issue):\n" + "\n".join(missing)


def test_names_left_for_later_are_still_missing_and_few():
    arrived = [key for key in LATER if _importable(*key.split(":"))]
    assert arrived == [], f"these arrived; remove them from LATER: {arrived}"
    assert all(key.count(":") == 1 and value.startswith("issue ") for key, value in LATER.items())
    assert len(LATER) < len(NAMES) // 2


@pytest.mark.parametrize("statement", [
    "from drivetrain.utils import patch_environment, compare_versions, is_torch_version, tqdm, set_seed",
    "from drivetrain.utils.environment import patch_environment, str_to_bool",
    "from drivetrain.utils.versions import compare_versions",
    "from drivetrain.utils.constants import SAFE_WEIGHTS_NAME, WEIGHTS_NAME",
    "from drivetrain.utils.dataclasses import DistributedType, DeepSpeedPlugin",
    "from drivetrain.utils.launch import PrepareForLaunch, prepare_simple_launcher_cmd_env",
    "from drivetrain.utils.memory import find_executable_batch_size",
    "from drivetrain.utils.imports import is_transformers_available",
    "from drivetrain.utils.other import compile_regions",
    "from drivetrain.utils.operations import gather_object",
    "from drivetrain.utils.random import set_seed",
    "from drivetrain.utils.tqdm import tqdm",
    # a plugin's function at the submodule path Accelerate documents (the cuda platform's)
    "from drivetrain.utils.environment import override_numa_affinity",
    # probes plugins contribute to `utils` are at `utils.imports` too, as every probe is in Accelerate
    "from drivetrain.utils.imports import is_deepspeed_available, is_wandb_available, is_xpu_available",
])
def test_accelerate_submodule_paths(statement):
    exec(statement, {})


def test_every_utils_submodule_serves_names_contributed_to_it(monkeypatch):
    import collections
    import pkgutil
    import warnings

    from fake_plugins import fake_plugin

    import drivetrain.utils
    from drivetrain import plugin_manager
    from drivetrain.plugin_api import PluginInfo, hookimpl

    submodules = [info.name for info in pkgutil.iter_modules(drivetrain.utils.__path__) if not info.name.startswith("_")]
    assert {"environment", "constants", "modeling", "dataclasses"} <= set(submodules)

    @hookimpl
    def drivetrain_public_names():
        names = {f"utils.{sub}.contributed_thing": "collections:OrderedDict" for sub in submodules}
        names["utils.environment.str_to_bool"] = "collections:Counter"  # cannot replace the module's own
        return names

    entry = fake_plugin("contributor", PLUGIN_INFO=PluginInfo(api_version="2.0", description="names"),
                        drivetrain_public_names=drivetrain_public_names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager = plugin_manager.PluginManager(env={}, entry_points=[entry]).load()
    monkeypatch.setattr(plugin_manager, "_default_manager", manager)
    for sub in submodules:
        module = importlib.import_module(f"drivetrain.utils.{sub}")
        assert module.contributed_thing is collections.OrderedDict, sub
        with pytest.raises(AttributeError, match=f"drivetrain.utils.{sub}"):
            module.not_contributed_anywhere  # noqa: B018
    from drivetrain.utils.environment import str_to_bool

    assert str_to_bool("yes") == 1


def test_backend_probes_come_from_plugins_or_answer_false(monkeypatch):
    import drivetrain.utils as utils
    from drivetrain.utils.imports import is_package_available

    # a tracker's probe is its plugin's and says whether the library is there
    assert utils.is_wandb_available() == is_package_available("wandb")
    # a backend no installed plugin provides: the probe exists and answers False
    assert utils.is_npu_available() is False and utils.is_megatron_lm_available() is False
    with pytest.raises(AttributeError):
        utils.is_no_such_library_available  # noqa: B018 - typos still fail


def test_a_blocked_plugin_s_probe_answers_false(monkeypatch):
    import subprocess
    import sys

    code = ("from drivetrain.utils import is_wandb_available; from drivetrain.enums import LoggerType;"
            "print(is_wandb_available(), LoggerType.WANDB == 'wandb')")
    env = {**__import__("os").environ, "DRIVETRAIN_BLOCK_PLUGINS": "wandb"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_enums_have_every_accelerate_member():
    from drivetrain.utils import (
        CustomDtype,
        DistributedType,
        DynamoBackend,
        LoggerType,
        PrecisionType,
        RNGType,
        SageMakerDistributedType,
    )

    assert PrecisionType.FP8 == "fp8" and LoggerType.COMETML == "comet_ml" == LoggerType.COMET_ML
    assert DistributedType.MULTI_NPU == "MULTI_NPU" and DistributedType.MEGATRON_LM in list(DistributedType)
    assert RNGType.XPU == "xpu" and DynamoBackend.TENSORRT == "TENSORRT"
    assert CustomDtype.INT4 == "int4" and CustomDtype.FP8 == "fp8"
    assert SageMakerDistributedType.DATA_PARALLEL == "DATA_PARALLEL"


def test_utils_imports_refuses_a_probe_nobody_contributes():
    import drivetrain.utils.imports as imports

    with pytest.raises(AttributeError, match="drivetrain.utils.imports"):
        imports.is_no_such_backend_available



MODULES_FILE = Path(__file__).parent / "data" / "accelerate-modules.txt"
ACCELERATE_MODULES = [line for line in MODULES_FILE.read_text().splitlines() if line and not line.startswith("#")]


@pytest.mark.filterwarnings("ignore:memory_utils has been reorganized:FutureWarning")
def test_every_module_of_accelerate_is_a_module_of_drivetrain():
    missing = []
    for name in ACCELERATE_MODULES:
        try:
            importlib.import_module("drivetrain" + name[len("accelerate"):])
        except ImportError as error:
            missing.append(f"{name}: {error}")
    assert not missing, missing


# Accelerate 1.15's backend modules of `utils` -> the names it defines there and re-exports from `utils`
ACCELERATE_BACKEND_UTILS = {
    "ao": ("convert_model_to_fp8_ao", "filter_first_and_last_linear_layers", "has_ao_layers"),
    "bnb": ("has_4bit_bnb_layers", "load_and_quantize_model"),
    "megatron_lm": ("AbstractTrainStep", "BertTrainStep", "GPTTrainStep", "MegatronEngine", "MegatronLMDummyDataLoader",
                    "MegatronLMDummyScheduler", "MegatronLMOptimizerWrapper", "MegatronLMSchedulerWrapper",
                    "T5TrainStep", "avg_losses_across_data_parallel_group", "gather_across_data_parallel_groups"),
    "torch_xla": ("install_xla",),
    "transformer_engine": ("apply_fp8_autowrap", "contextual_fp8_autocast", "convert_model",
                           "has_transformer_engine_layers"),
}


def test_accelerates_backend_util_modules_serve_drivetrain_utils_own_objects():
    """The plugin owning each backend contributes Accelerate's names at the module Accelerate
    defines them in; they are the objects `drivetrain.utils` serves."""
    import drivetrain.utils

    for module_name, names in ACCELERATE_BACKEND_UTILS.items():
        module = importlib.import_module(f"drivetrain.utils.{module_name}")
        for name in names:
            assert getattr(module, name) is getattr(drivetrain.utils, name), (module_name, name)
        with pytest.raises(AttributeError):
            module.no_such_name


def test_accelerates_command_parser_takes_both_spellings_and_records_what_was_given():
    from drivetrain.commands.utils import CustomArgumentParser

    parser = CustomArgumentParser()
    parser.add_argument("--num_processes", type=int, default=1)
    group = parser.add_argument_group("group")
    group.add_argument("--use_cpu", action="store_true")
    args = parser.parse_args(["--num-processes", "2", "--use-cpu"])
    assert args.num_processes == 2 and args.use_cpu and args.nondefault == {"num_processes", "use_cpu"}
    assert parser.parse_args([]).use_cpu is False
    assert "--num-processes" not in parser.format_help()


def test_accelerates_example_comparison_finds_what_the_complete_script_lacks(tmp_path, monkeypatch):
    from drivetrain.test_utils.examples import clean_lines, compare_against_test, get_function_contents_by_name

    def script(body):
        return ("import x\n\ndef training_function(config, args):\n    accelerator = make()\n" + body
                + "    return done\n\ndef main():\n    parse()\n\nif __name__ == '__main__':\n    main()\n")

    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "nlp_example.py").write_text(script(""))
    (tmp_path / "feature.py").write_text(script("    # a comment\n    track()\n    checkpoint()\n"))
    (tmp_path / "complete.py").write_text(script("    track()\n"))
    monkeypatch.chdir(tmp_path)
    assert compare_against_test("complete.py", "feature.py", parser_only=False) == ["    checkpoint()\n"]
    assert compare_against_test("feature.py", "feature.py", parser_only=False) == []
    assert compare_against_test("complete.py", "feature.py", parser_only=True) == []
    lines = (tmp_path / "feature.py").read_text().splitlines(keepends=True)
    assert clean_lines(get_function_contents_by_name(lines, "main")) == ["def main():\n", "    parse()\n"]
    with pytest.raises(ValueError, match="training_function"):
        get_function_contents_by_name(lines, "other")


def test_enums_print_as_accelerate_s_do():
    """Accelerate's ``(str, Enum)`` classes print ``Class.MEMBER``; those over its ``BaseEnum``
    print the value. Both compare equal to the value, and a member survives pickling."""
    import pickle

    from drivetrain.utils import (
        ComputeEnvironment,
        CustomDtype,
        DDPCommunicationHookType,
        DistributedType,
        DynamoBackend,
        LoggerType,
        PrecisionType,
        RNGType,
        SageMakerDistributedType,
    )

    member = DistributedType.MULTI_CPU
    assert str(member) == f"{member}" == "%s" % member == "DistributedType.MULTI_CPU"
    assert member == "MULTI_CPU" and member.value == "MULTI_CPU" and member.name == "MULTI_CPU"
    assert member in DistributedType and "MULTI_CPU" in DistributedType and DistributedType(member) is member
    assert pickle.loads(pickle.dumps(member)) is member
    assert str(ComputeEnvironment.LOCAL_MACHINE) == "ComputeEnvironment.LOCAL_MACHINE"
    assert str(SageMakerDistributedType.NO) == "SageMakerDistributedType.NO"
    assert str(CustomDtype.INT4) == "CustomDtype.INT4"
    assert f"{PrecisionType.BF16}" == str(PrecisionType.BF16) == "bf16" and str(DynamoBackend.NO) == "NO"
    assert str(LoggerType.ALL) == "all" and str(RNGType.TORCH) == "torch"
    assert str(DDPCommunicationHookType.FP16) == f"{DDPCommunicationHookType.FP16}" == "fp16"


MODULES_FILE = Path(__file__).parent / "data" / "accelerate-modules.txt"
ROOT = Path(__file__).parent.parent


def test_only_the_surface_answers_names_a_module_does_not_define():
    """No module of core/ or plugins/ writes a module ``__getattr__``: the ones that answer names
    they do not define assign ``surface_getattr(...)``, the one mechanism, and each is an
    Accelerate import path (``tests/data/accelerate-modules.txt``), a submodule of Accelerate's
    ``utils`` package (every one serves names plugins contribute to it), or the plugin API."""
    import ast

    from drivetrain.kernel.contributed import SURFACE_MODULES

    written, assigned = [], []
    for path in sorted([*(ROOT / "core").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]):
        for node in ast.parse(path.read_text()).body:
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__":
                written.append(where)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__getattr__" for t in node.targets):
                call = node.value
                name = getattr(getattr(call, "func", None), "id", None)
                assert name in ("surface_getattr", "plugin_module_getattr"), where
                assigned.append(path)
    assert written == [], "a module __getattr__ outside the one mechanism:\n" + "\n".join(written)
    for path in assigned:
        relative = path.relative_to(ROOT / ("core" if "core" in path.parts[len(ROOT.parts):][:1] else "plugins"))
        importlib.import_module(".".join(relative.with_suffix("").parts).removesuffix(".__init__"))
    accelerate_paths = {line.strip().replace("accelerate", "drivetrain", 1)
                        for line in MODULES_FILE.read_text().splitlines() if line.strip() and not line.startswith("#")}
    ours = {name for name in SURFACE_MODULES if name.startswith(("drivetrain.plugin_api", "drivetrain.utils."))}
    assert set(SURFACE_MODULES) - ours <= accelerate_paths, sorted(set(SURFACE_MODULES) - ours - accelerate_paths)
    assert len(SURFACE_MODULES) >= len(assigned) - 2  # the command modules share plugin_module_getattr's
