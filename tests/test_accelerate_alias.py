"""The `accelerate` alias distribution (compat/accelerate), installed by pip into a throwaway
virtual environment: its modules are drivetrain's, its command is drivetrain's, and it refuses
to share the name with a real Hugging Face Accelerate."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from alias_env import ALIAS, fake_real_accelerate, make_alias_env, make_env
from conftest import clean_environ

pytestmark = pytest.mark.slow

IDENTITY = r"""
import importlib.metadata, pickle, sys
from unittest import mock

import accelerate, drivetrain
assert accelerate.Accelerator is drivetrain.Accelerator and accelerate.DeepSpeedPlugin is drivetrain.DeepSpeedPlugin
# libraries compare `accelerate.__version__` with Accelerate releases (PEFT, TRL): the API version
assert accelerate.__version__ == importlib.metadata.version("accelerate")
import accelerate.utils.operations
import drivetrain.utils.operations
assert accelerate.utils.operations is drivetrain.utils.operations
assert sys.modules["accelerate.utils"] is drivetrain.utils and drivetrain.utils.__name__ == "drivetrain.utils"
assert drivetrain.utils.__spec__.name == "drivetrain.utils"  # the alias leaves drivetrain's modules as they are
from accelerate.state import PartialState
from accelerate.hooks import add_hook_to_module
from accelerate.big_modeling import init_empty_weights
import drivetrain.state, drivetrain.hooks, drivetrain.big_modeling
assert PartialState is drivetrain.state.PartialState and add_hook_to_module is drivetrain.hooks.add_hook_to_module
assert init_empty_weights is drivetrain.big_modeling.init_empty_weights
# a patch through one name is seen through the other
with mock.patch("accelerate.utils.operations.gather", lambda tensor: "patched"):
    assert drivetrain.utils.operations.gather(1) == "patched"
# what a real Accelerate pickled names accelerate's module path: it resolves to drivetrain's class
cls = pickle.loads(b"caccelerate.utils.dataclasses\nProjectConfiguration\n.")
assert cls is drivetrain.utils.ProjectConfiguration
try:
    import accelerate.no_such_module
except ModuleNotFoundError as exc:
    assert "accelerate.no_such_module" in str(exc)
else:
    raise AssertionError("an unknown submodule imported")
# the version libraries check: the Accelerate API it implements, marked as the alias
assert importlib.metadata.version("accelerate") == "1.15.0+drivetrain"
from transformers.utils import is_accelerate_available
assert is_accelerate_available()
print("ok")
"""


@pytest.fixture(scope="module")
def alias(tmp_path_factory):
    return make_alias_env(tmp_path_factory.mktemp("alias") / "venv")


def run(command, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=240,
                          env=clean_environ(**env))


def test_accelerate_modules_are_drivetrains_own_module_objects(alias):
    result = run([alias.python, "-c", IDENTITY])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_accelerate_command_is_drivetrain_and_says_so(alias):
    result = run([alias.bin / "accelerate", "env"])
    assert result.returncode == 0, result.stderr
    assert "- accelerate: 1.15.0+drivetrain, the drivetrain alias" in result.stdout
    assert "`drivetrain` version" in result.stdout
    version = run([alias.bin / "accelerate", "--version"])
    assert version.stdout.startswith("drivetrain ")
    launch_help = run([alias.bin / "accelerate-launch", "--help"])
    assert launch_help.returncode == 0 and "--num_processes" in launch_help.stdout
    # Accelerate's other console scripts are there too, each the drivetrain command of that name
    merge_help = run([alias.bin / "accelerate-merge-weights", "--help"])
    assert merge_help.returncode == 0 and "merge-weights" in merge_help.stdout
    for script in ("accelerate-config", "accelerate-estimate-memory"):
        assert run([alias.bin / script, "--help"]).returncode == 0, script


def test_the_alias_refuses_to_run_beside_a_real_accelerate(alias, tmp_path):
    fake_real_accelerate(tmp_path)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    imported = run([alias.python, "-c", "import accelerate"], PYTHONPATH=path)
    assert imported.returncode == 1
    last = imported.stderr.strip().splitlines()[-1]
    assert "cannot run beside a real Hugging Face Accelerate (accelerate 1.15.0 in" in last
    assert "pip uninstall accelerate" in last
    command = run([alias.bin / "accelerate", "env"], PYTHONPATH=path)
    assert command.returncode == 1
    assert command.stderr.count("\n") == 1 and "cannot run beside a real Hugging Face Accelerate" in command.stderr


def test_install_refuses_a_real_accelerate_and_uninstall_restores_the_environment(tmp_path):
    env = make_env(tmp_path / "venv")
    site = env.site_packages
    fake_real_accelerate(site)
    refused = env.install_alias()
    assert refused.returncode != 0
    assert "will not install over a real Hugging Face Accelerate (accelerate 1.15.0 in" in refused.stderr
    assert (site / "accelerate-1.15.0.dist-info").is_dir()  # the real one is left alone
    for leftover in site.glob("accelerate-1.15.0.dist-info"):
        (leftover / "METADATA").unlink()
        leftover.rmdir()

    before = sorted(p.name for p in site.iterdir())
    bin_before = sorted(p.name for p in env.bin.iterdir())
    installed = env.install_alias()
    assert installed.returncode == 0, installed.stderr
    assert (env.bin / "accelerate").exists()
    assert run([env.python, "-c", "import accelerate"]).returncode == 0
    removed = env.pip("uninstall", "--yes", "accelerate")
    assert removed.returncode == 0, removed.stderr
    assert sorted(p.name for p in site.iterdir() if p.name != "__pycache__") == before
    assert sorted(p.name for p in env.bin.iterdir()) == bin_before
    # nothing of the alias is left in this environment (a base environment may have its own copy)
    gone = run([env.python, "-c", "import importlib.util as u; s = u.find_spec('accelerate'); print(s and s.origin)"])
    assert not gone.stdout.strip().startswith(str(site)), gone.stdout


def test_from_pretrained_offloads_part_of_a_model_to_disk_through_the_alias(alias):
    # the client suite's representative in the main suite (one process, seconds): transformers
    # dispatches through `accelerate`, which is drivetrain here
    script = Path(__file__).parent / "clients" / "scripts" / "offload_job.py"
    result = run([alias.python, script])
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("RESULT ", 1)[1])
    assert "disk" in report["placement"]
    assert report["same_logits"] and report["same_tokens"]
    # string sizes work, converted in the caller's dict as Accelerate's get_max_memory does
    assert report["max_memory_after"]["disk"] == 10**9 and isinstance(report["max_memory_after"]["cpu"], int)
    # one streamer for the model; after the first forward, weights are found read ahead
    (streamer,) = report["streamers"]
    assert streamer["read_ahead"] > 3 * streamer["on_demand"], streamer


def test_the_trainer_trains_on_drivetrain_through_the_alias(alias, tmp_path):
    # the headline of the client suite, in one process: `Trainer(...)` needs `accelerate`
    script = Path(__file__).parent / "clients" / "scripts" / "trainer_job.py"
    result = run([alias.python, script, "--output-dir", tmp_path, "--max-steps", "2"])
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("RESULT ", 1)[1])
    assert report["accelerator"] == "drivetrain.facade.accelerator" and report["world_size"] == 1
    assert len(report["losses"]) == 2 and all(math.isfinite(loss) for loss in report["losses"])


def test_python_m_runs_accelerates_command_modules(alias):
    launch = run([alias.python, "-m", "accelerate.commands.launch", "--help"])
    assert launch.returncode == 0 and "--num_processes" in launch.stdout, launch.stderr
    cli = run([alias.python, "-m", "accelerate.commands.accelerate_cli", "--version"])
    assert cli.returncode == 0 and cli.stdout.startswith("drivetrain "), cli.stderr


def test_without_drivetrain_the_alias_says_to_install_it(alias):
    # -S and a path of the alias alone: an interpreter where the alias is installed and drivetrain is not
    alone = {"PYTHONPATH": str(alias.site_packages)}
    assert run([alias.python, "-S", "-c", "import drivetrain"], **alone).returncode == 1
    imported = run([alias.python, "-S", "-c", "import accelerate"], **alone)
    assert imported.returncode == 1
    last = imported.stderr.strip().splitlines()[-1]
    assert last.startswith("drivetrain_accelerate_alias.DrivetrainMissing: ") and "`pip install drivetrain`" in last
    command = run([alias.python, "-S", "-c", "from drivetrain_accelerate_alias.cli import main; raise SystemExit(main())",
                   "env"], **alone)
    assert command.returncode == 1 and command.stderr.count("\n") == 1, command.stderr
    assert "`pip install drivetrain`" in command.stderr


def test_a_wheel_built_for_another_environment_refuses_to_run_where_it_replaced_accelerate(alias, tmp_path):
    other = make_env(tmp_path / "other")
    fake_real_accelerate(other.site_packages)
    info = other.site_packages / "accelerate-1.15.0.dist-info"
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/RECORD,,\n")  # pip can uninstall it
    built = alias.pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "a"), str(ALIAS))
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "a").glob("accelerate-*.whl")
    # pip runs nothing of a wheel while installing it: the real Accelerate is replaced ...
    assert other.pip("install", "--quiet", "--no-deps", str(wheel)).returncode == 0
    assert not info.exists()
    # ... and the alias refuses to run there, naming the install that checks
    imported = run([other.python, "-c", "import accelerate"])
    assert imported.returncode == 1
    last = imported.stderr.strip().splitlines()[-1]
    assert "UncheckedWheel: " in last and "wheel built for another environment" in last
    assert "pip install --force-reinstall --no-deps" in last and "compat/accelerate" in last
    command = run([other.bin / "accelerate", "env"])
    assert command.returncode == 1 and command.stderr.count("\n") == 1 and "wheel built for" in command.stderr
    # a wheel built by the environment it goes into was checked there, and runs
    built = other.pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "b"), str(ALIAS))
    assert built.returncode == 0, built.stderr
    (own,) = (tmp_path / "b").glob("accelerate-*.whl")
    assert other.pip("install", "--quiet", "--no-deps", "--force-reinstall", str(own)).returncode == 0
    assert run([other.python, "-c", "import accelerate"]).returncode == 0
    # a wheel built as portable on purpose (its installer uninstalls Accelerate first) runs anywhere
    built = alias.pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "-C", "portable=1", "-w",
                      str(tmp_path / "c"), str(ALIAS))
    assert built.returncode == 0, built.stderr
    (portable,) = (tmp_path / "c").glob("accelerate-*.whl")
    assert other.pip("install", "--quiet", "--no-deps", "--force-reinstall", str(portable)).returncode == 0
    assert run([other.python, "-c", "import accelerate"]).returncode == 0
