"""The names transformers imports from `accelerate.*` (its Trainer, TrainingArguments, `env`
command and DeepSpeed integration) are at the same paths in drivetrain, backend names from the
plugins that own them."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import clean_environ


def test_the_names_transformers_imports_are_at_their_paths():
    from drivetrain.commands.config import default_config_file, load_config_from_file
    from drivetrain.commands.config import config_args
    from drivetrain.utils.constants import FSDP_AUTO_WRAP_POLICY, FSDP_SHARDING_STRATEGY
    from drivetrain.utils.deepspeed import DeepSpeedSchedulerWrapper, DummyOptim, HfDeepSpeedConfig
    from drivetrain.utils.memory import clear_device_cache

    import drivetrain.utils

    assert default_config_file == config_args.default_config_file and load_config_from_file is config_args.load_config_from_file
    # transformers indexes these lists: [0] is its default policy, [1] the size-based one
    assert FSDP_AUTO_WRAP_POLICY[:2] == ["TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP"]
    assert FSDP_SHARDING_STRATEGY.index("SHARD_GRAD_OP") == 1 and "FULL_SHARD" in FSDP_SHARDING_STRATEGY
    # one class at both of Accelerate's paths
    assert DeepSpeedSchedulerWrapper is drivetrain.utils.DeepSpeedSchedulerWrapper
    assert DummyOptim is drivetrain.utils.DummyOptim and HfDeepSpeedConfig is drivetrain.utils.HfDeepSpeedConfig
    config = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}, "train_batch_size": 8})
    assert config.is_zero3() and config.get_value("train_batch_size") == 8
    clear_device_cache(garbage_collection=True)


def test_backend_names_leave_with_their_plugin():
    code = ("import drivetrain.utils.deepspeed as d, drivetrain.utils.constants as c\n"
            "for module, name in ((d, 'HfDeepSpeedConfig'), (c, 'FSDP_SHARDING_STRATEGY')):\n"
            "    try:\n        getattr(module, name)\n"
            "    except AttributeError as exc:\n        print('missing', name)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=clean_environ(DRIVETRAIN_BLOCK_PLUGINS="deepspeed,fsdp"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["missing HfDeepSpeedConfig", "missing FSDP_SHARDING_STRATEGY"]


def test_a_scripts_own_option_that_prefixes_launch_options_reaches_the_script():
    from drivetrain.cli import launch_cmd

    # transformers' example scripts and Trainer jobs take `--fsdp`, `--deepspeed`, `--bf16`
    args = launch_cmd.build_parser().parse_args(["--num_processes", "2", "train.py", "--fsdp", "--deepspeed", "x"])
    assert args.training_script == "train.py" and args.training_script_args == ["--fsdp", "--deepspeed", "x"]


_FROM_IMPORT = re.compile(r"^[ \t]*from (accelerate(?:\.\w+)*) import (\([^)]*\)|[^\n]*)", re.MULTILINE)


def _client_imports(library: str) -> set[tuple[str, str]]:
    """Every ``from accelerate... import name`` in an installed library's source."""
    root = Path(importlib.util.find_spec(library).origin).parent
    found = set()
    for path in root.rglob("*.py"):
        text = path.read_text(errors="replace")
        if "from accelerate" not in text:
            continue
        for module, names in _FROM_IMPORT.findall(text):
            for name in re.sub(r"#[^\n]*", "", names).strip("()").replace("\n", " ").split(","):
                name = name.strip().split(" as ")[0].strip()
                if name and name != "*":
                    found.add(("drivetrain" + module[len("accelerate"):], name))
    return found


@pytest.mark.parametrize("library", ["transformers", "peft", "trl"])
def test_every_name_a_client_imports_from_accelerate_is_at_drivetrains_path(library):
    if importlib.util.find_spec(library) is None:  # the library is only read, never imported
        pytest.skip(f"{library} is not installed")
    imports = _client_imports(library)
    assert imports, f"{library} imports nothing from accelerate: the scan is broken"
    missing = []
    for module, name in sorted(imports):
        try:
            target = importlib.import_module(module)
            if not hasattr(target, name):
                importlib.import_module(f"{module}.{name}")
        except ImportError:
            missing.append(f"{module}:{name}")
    assert missing == [], f"{library} imports names drivetrain lacks:\n" + "\n".join(missing)


def test_module_class_and_parameters_by_name():
    from drivetrain.utils.dataclasses import get_module_class_from_name
    from drivetrain.utils.fsdp_utils import get_parameters_from_modules

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(2, 2)

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Block(), Block())
    assert get_module_class_from_name(model, "Block") is Block
    assert get_module_class_from_name(model, "Linear") is torch.nn.Linear
    assert get_module_class_from_name(model, "Conv2d") is None
    assert get_parameters_from_modules(None, model, "cpu") == set()
    by_pattern = get_parameters_from_modules(r"\d\.inner", model, "cpu")
    assert by_pattern == set(model[1].parameters()) | set(model[2].parameters())
    assert get_parameters_from_modules([model[0]], model, "cpu") == set(model[0].parameters())
