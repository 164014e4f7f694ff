"""The deepspeed plugin: option classes, "auto" values, launch options, the launcher, and real
2-process training with ZeRO stages 1, 2 and 3 (with and without CPU optimizer offload).

The option tests run everywhere. The engine tests need deepspeed (the ``test`` extra installs
it) and are skipped with the reason when it is not installed. DeepSpeed compiles ops on first
use (a shared-memory collective, CPU Adam); the ``deepspeed_ops`` fixture builds them once into
``TORCH_EXTENSIONS_DIR`` (unless set: ``drivetrain/torch_extensions`` under the user's cache
directory, outside the checkout, so that fresh clones on one machine reuse the build).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_environ
from launching import assert_ok, launch

from drivetrain.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
needs_deepspeed = pytest.mark.skipif(not HAS_DEEPSPEED, reason="deepspeed is not installed "
                                     "(pip install -c constraints.txt -e '.[deepspeed]')")


# ------------------------------------------------------------------ import cost


def test_importing_drivetrain_and_listing_plugins_never_imports_deepspeed():
    code = (
        "import contextlib, io, sys\n"
        "import drivetrain\n"
        "from drivetrain import DeepSpeedPlugin, DummyOptim, DummyScheduler, DistributedType\n"
        "assert DistributedType.DEEPSPEED == 'DEEPSPEED'\n"
        "plugin = DeepSpeedPlugin(zero_stage=3, offload_optimizer_device='cpu')\n"
        "DummyScheduler(DummyOptim([], lr=0.1))\n"
        "from drivetrain.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    assert main(['plugins', 'list']) == 0\n"
        "    assert main(['plugins', 'info', 'deepspeed']) == 0\n"
        "assert 'deepspeed' in out.getvalue()\n"
        "print(sorted(m for m in sys.modules if m == 'deepspeed' or m.startswith('deepspeed.')))\n"
        "print(sorted(m for m in sys.modules if m == 'torch'))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "[]"], result.stdout


# Hides the deepspeed distribution and module from a fresh interpreter, as on a machine
# where it is not installed.
WITHOUT_DEEPSPEED = """
import sys, importlib.abc, importlib.metadata as md
import drivetrain.kernel.installed as installed
_real = md.version
def _version(name):
    if name.lower() == "deepspeed":
        raise md.PackageNotFoundError(name)
    return _real(name)
md.version = _version
_real_distributions = md.distributions
def _distributions(**kwargs):
    return iter(()) if kwargs.get("name", "").lower() == "deepspeed" else _real_distributions(**kwargs)
md.distributions = _distributions
_real_installed = installed.installed_version
installed.installed_version = lambda name: None if name.lower() == "deepspeed" else _real_installed(name)
class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "deepspeed":
            raise ModuleNotFoundError("No module named 'deepspeed'")
sys.meta_path.insert(0, _Hide())
"""


def test_without_deepspeed_the_names_import_and_selecting_it_names_the_extra(tmp_path):
    code = WITHOUT_DEEPSPEED + (
        "from drivetrain import DeepSpeedPlugin, DistributedType, Accelerator\n"
        "plugin = DeepSpeedPlugin(zero_stage=2)\n"
        "assert DistributedType.DEEPSPEED == 'DEEPSPEED'\n"
        "try:\n"
        "    Accelerator(deepspeed_plugin=plugin)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "from drivetrain.cli.main import main\n"
        "sys.exit(main(['launch', '--cpu', '--num-processes', '2', '--use-deepspeed', 'train.py']))\n"
    )
    env = dict(os.environ, HF_HOME=str(tmp_path))
    (tmp_path / "train.py").write_text("print('never run')\n")  # the launch checks the script exists first
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("PluginSelectionError") and "pip install 'drivetrain[deepspeed]'" in first, first
    assert result.stderr.strip().splitlines()[-1].startswith("drivetrain: error:")
    assert "pip install 'drivetrain[deepspeed]'" in result.stderr.strip().splitlines()[-1]


def test_use_deepspeed_variable_and_distributed_type_select_the_strategy():
    from drivetrain.plugin_manager import get_plugin_manager
    from drivetrain.selection.choice import requests_from_env, strategy_for_distributed_type

    manager = get_plugin_manager()
    assert requests_from_env(manager, env={"ACCELERATE_USE_DEEPSPEED": "true"}).strategy == "deepspeed"
    assert requests_from_env(manager, env={"DRIVETRAIN_USE_DEEPSPEED": "1"}).strategy == "deepspeed"
    assert strategy_for_distributed_type(manager, "DEEPSPEED") == "deepspeed"


# ------------------------------------------------------------------ options


def test_options_build_a_config_and_read_the_environment(clean_env):
    from drivetrain import DeepSpeedPlugin

    plugin = DeepSpeedPlugin()
    assert plugin.zero_stage == 2 and plugin.offload_optimizer_device == "none" and not plugin.zero3_init_flag
    assert plugin.deepspeed_config["zero_optimization"] == {"stage": 2}
    assert plugin.is_auto("train_micro_batch_size_per_gpu") and plugin.is_auto("gradient_accumulation_steps")
    clean_env.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    clean_env.setenv("DRIVETRAIN_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu")
    clean_env.setenv("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "true")
    clean_env.setenv("ACCELERATE_GRADIENT_CLIPPING", "0.5")
    plugin = DeepSpeedPlugin(offload_optimizer_device="cpu")
    assert plugin.zero_stage == 3 and plugin.zero3_init_flag  # on by default with ZeRO-3
    assert plugin.get_value("zero_optimization") == {
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"},
        "stage3_gather_16bit_weights_on_model_save": True}
    assert plugin.deepspeed_config["gradient_clipping"] == 0.5
    assert DeepSpeedPlugin(zero_stage=1).zero_stage == 1  # an argument beats the environment
    clean_env.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "three")
    with pytest.raises(ConfigError, match=r"DRIVETRAIN_DEEPSPEED_ZERO_STAGE \(environment\): zero_stage must be"):
        DeepSpeedPlugin()


def test_nvme_offload_needs_a_path(clean_env):
    from drivetrain import DeepSpeedPlugin

    with pytest.raises(ConfigError, match="offload_param_device=nvme needs offload_param_nvme_path"):
        DeepSpeedPlugin(zero_stage=3, offload_param_device="nvme")
    plugin = DeepSpeedPlugin(zero_stage=3, offload_param_device="nvme", offload_param_nvme_path="/local_nvme")
    assert plugin.get_value("zero_optimization.offload_param") == {"device": "nvme", "nvme_path": "/local_nvme"}


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


# Accelerate's ZeRO-3 offload example, with "auto" left for the launch options and prepare().
ZERO3_OFFLOAD = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                      "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": "auto", "offload_optimizer": {"device": "auto", "pin_memory": True},
                          "offload_param": {"device": "cpu"}, "overlap_comm": True, "reduce_bucket_size": "auto",
                          "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                          "stage3_max_live_parameters": "auto", "stage3_max_reuse_distance": "auto",
                          "stage3_gather_16bit_weights_on_model_save": "auto"},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False,
}


def test_auto_values_of_a_config_file_are_filled(clean_env, tmp_path):
    from drivetrain import DeepSpeedPlugin
    from drivetrain_deepspeed.autofill import Facts, fill_auto_values

    path = _write(tmp_path / "zero3.json", ZERO3_OFFLOAD)
    plugin = DeepSpeedPlugin(hf_ds_config=str(path), zero_stage=3, offload_optimizer_device="cpu",
                             zero3_save_16bit_model=True)
    assert plugin.zero_stage == 3 and plugin.offload_param_device == "cpu" and plugin.zero3_init_flag
    assert plugin.get_value("zero_optimization.offload_optimizer") == {"device": "cpu", "pin_memory": True}
    plugin.set_mixed_precision("bf16")
    facts = Facts(world_size=4, gradient_accumulation_steps=2, micro_batch_sizes=[16, 8], mixed_precision="bf16",
                  gradient_clipping=None, save_16bit_model=True, hidden_size=64,
                  optimizer_params={"lr": 3e-4, "weight_decay": 0.01},
                  scheduler_params={"warmup_min_lr": 0, "warmup_max_lr": 3e-4, "warmup_num_steps": 10,
                                    "total_num_steps": 250})
    filled = fill_auto_values(plugin.deepspeed_config, facts, plugin.config_origin)
    assert filled["train_micro_batch_size_per_gpu"] == 8  # is_train_batch_min
    assert filled["train_batch_size"] == 8 * 2 * 4
    assert filled["gradient_accumulation_steps"] == 2 and filled["gradient_clipping"] == 1.0
    assert filled["fp16"]["enabled"] is False and filled["bf16"] == {"enabled": True}
    assert filled["optimizer"]["params"] == {"lr": 3e-4, "weight_decay": 0.01}
    assert filled["scheduler"]["params"] == {"warmup_min_lr": 0, "warmup_max_lr": 3e-4, "warmup_num_steps": 10,
                                             "total_num_steps": 250}
    zero = filled["zero_optimization"]
    assert zero["stage"] == 3 and zero["stage3_gather_16bit_weights_on_model_save"] is True
    assert zero["reduce_bucket_size"] == 64 * 64 and zero["stage3_prefetch_bucket_size"] == int(0.9 * 64 * 64)
    assert zero["stage3_param_persistence_threshold"] == 640
    assert zero["stage3_max_live_parameters"] == zero["stage3_max_reuse_distance"] == 1_000_000_000
    assert zero["overlap_comm"] is True and filled["steps_per_print"] == 2000  # the rest is untouched
    assert plugin.deepspeed_config["train_batch_size"] == "auto"  # filling works on a copy
    # the batch comes from train_batch_size when no loader is known
    only_total = fill_auto_values({"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto"},
                                  Facts(world_size=4, gradient_accumulation_steps=2))
    assert only_total["train_micro_batch_size_per_gpu"] == 8


def test_values_that_cannot_be_filled_are_named_in_one_error(tmp_path):
    from drivetrain_deepspeed.autofill import Facts, fill_auto_values

    config = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
              "optimizer": {"type": "Adam", "params": {"lr": "auto", "betas": "auto"}},
              "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}, "wall_clock_breakdown": "auto"}
    with pytest.raises(ConfigError) as caught:
        fill_auto_values(config, Facts(optimizer_params={"lr": 0.1}), "DeepSpeed config file ds.json")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("DeepSpeed config file ds.json: cannot fill \"auto\"")
    for key, hint in (("train_batch_size", "pass a DataLoader"), ("train_micro_batch_size_per_gpu", "DataLoader"),
                      ("optimizer.params.betas", "give betas= to DummyOptim"),
                      ("zero_optimization.reduce_bucket_size", "config.hidden_size"),
                      ("wall_clock_breakdown", "set a value")):
        assert key in message and hint in message, (key, message)
    assert "optimizer.params.lr" not in message
    # the hidden size's hint in Accelerate's words, which scripts match on: a config without it, or no config
    assert "Can find neither `model.config.hidden_size` nor `model.config.hidden_sizes`" in message
    with pytest.raises(ConfigError, match="Can't find `model.config` entry"):
        fill_auto_values(config, Facts(optimizer_params={"lr": 0.1, "betas": (0.9, 0.99)}, model_has_config=False),
                         "ds.json")


@pytest.mark.parametrize("content, error", [
    ('{"zero_optimization": {"stage": 3,}}', r"is not valid JSON: .* at line 1, column 35"),
    ('[1, 2]', "must hold a JSON object of keys to values, not list"),
    ({"zero_optimization": {"stage": "three"}}, r"zero_optimization.stage must be 0, 1, 2 or 3 \(or \"auto\"\)"),
    ({"zero_optimization": {"offload_optimizer": {"device": "gpu"}}},
     "zero_optimization.offload_optimizer.device must be none, cpu or nvme"),
    ({"fp16": {"enabled": "yes"}}, r"fp16.enabled must be true or false"),
    ({"train_micro_batch_size_per_gpu": 0}, "train_micro_batch_size_per_gpu must be a whole number above 0"),
    ({"optimizer": {"params": {"lr": 0.1}}}, r"optimizer needs a \"type\""),
    ({"zero_optimization": "on"}, "zero_optimization must be a mapping"),
])
def test_a_malformed_config_file_gives_a_clear_error(clean_env, tmp_path, content, error):
    from drivetrain import DeepSpeedPlugin

    path = _write(tmp_path / "ds.json", content)
    with pytest.raises(ConfigError, match=error) as caught:
        DeepSpeedPlugin(hf_ds_config=str(path))
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_config_file_needs_zero_optimization_and_defaults_gradient_accumulation_to_one(clean_env, tmp_path):
    from drivetrain import DeepSpeedPlugin

    path = _write(tmp_path / "ds.json", {"train_micro_batch_size_per_gpu": 2})
    with pytest.raises(ConfigError, match="Please specify the ZeRO optimization config in the DeepSpeed config"):
        DeepSpeedPlugin(hf_ds_config=str(path))
    assert issubclass(ConfigError, ValueError)  # Accelerate's callers catch ValueError
    path = _write(tmp_path / "ds.json", {"zero_optimization": {"stage": 1}})
    assert DeepSpeedPlugin(hf_ds_config=str(path)).deepspeed_config["gradient_accumulation_steps"] == 1
    given = DeepSpeedPlugin(hf_ds_config=str(path), gradient_accumulation_steps=3)
    assert given.deepspeed_config["gradient_accumulation_steps"] == 3


def test_deepspeed_config_process_fills_auto_and_reports_every_mismatch(clean_env):
    from drivetrain import DeepSpeedPlugin

    plugin = DeepSpeedPlugin(hf_ds_config={
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": 0.01}},
        "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"},
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4})
    kwargs = {"optimizer.params.lr": 5e-5, "optimizer.params.weight_decay": 0.01, "train_batch_size": 8,
              "train_micro_batch_size_per_gpu": 4, "zero_optimization.reduce_bucket_size": 100,
              "fp16.enabled": False}  # a key the config lacks is no mismatch
    plugin.deepspeed_config_process(**kwargs)
    assert plugin.get_value("optimizer.params.lr") == 5e-5 and plugin.get_value("train_batch_size") == 8
    with pytest.raises(ConfigError) as caught:
        plugin.deepspeed_config_process(**{**kwargs, "optimizer.params.lr": 1e-5, "train_batch_size": 16})
    assert "optimizer.params.lr" in str(caught.value) and "train_batch_size" in str(caught.value)
    plugin.deepspeed_config_process(must_match=False, **{**kwargs, "optimizer.params.lr": 1e-5})
    plugin.deepspeed_config["optimizer"]["params"]["lr"] = "auto"
    del kwargs["optimizer.params.lr"]
    with pytest.raises(ConfigError, match="`optimizer.params.lr` not found in kwargs"):
        plugin.deepspeed_config_process(**kwargs)


def test_hf_ds_config_shares_the_plugin_config(clean_env, tmp_path):
    from drivetrain import DeepSpeedPlugin

    for plugin in (DeepSpeedPlugin(zero_stage=3), DeepSpeedPlugin(hf_ds_config=dict(ZERO3_OFFLOAD), zero_stage=3)):
        assert plugin.hf_ds_config.config is plugin.deepspeed_config and plugin.hf_ds_config.is_zero3()
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = 7
        node, key = plugin.hf_ds_config.find_config_node("train_micro_batch_size_per_gpu")
        assert node[key] == 7
        plugin.replace_config({**plugin.deepspeed_config, "train_batch_size": 14})
        assert plugin.hf_ds_config.get_value("train_batch_size") == 14
    again = DeepSpeedPlugin(hf_ds_config=plugin.hf_ds_config)  # an HfDeepSpeedConfig is taken as it is
    assert again.hf_ds_config is plugin.hf_ds_config and again.deepspeed_config is plugin.deepspeed_config


def test_missing_config_file_and_contradicting_options(clean_env, tmp_path):
    from drivetrain import DeepSpeedPlugin

    with pytest.raises(ConfigError, match="DeepSpeed config file .*nope.json does not exist"):
        DeepSpeedPlugin(hf_ds_config=str(tmp_path / "nope.json"))
    path = _write(tmp_path / "ds.json", {"zero_optimization": {"stage": 3}, "gradient_accumulation_steps": 4})
    clean_env.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    with pytest.raises(ConfigError, match=r"DRIVETRAIN_DEEPSPEED_ZERO_STAGE \(environment\) sets zero_stage=2 "
                                          r"but DeepSpeed config file .* has zero_optimization.stage=3"):
        DeepSpeedPlugin(hf_ds_config=str(path))
    clean_env.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    plugin = DeepSpeedPlugin(hf_ds_config=str(path))  # agreeing is fine
    assert plugin.zero_stage == 3 and plugin.gradient_accumulation_steps == 4
    yaml_path = tmp_path / "ds.yaml"
    yaml_path.write_text("zero_optimization:\n  stage: 1\ntrain_micro_batch_size_per_gpu: 2\n")
    clean_env.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE")
    assert DeepSpeedPlugin(hf_ds_config=yaml_path).zero_stage == 1


@needs_deepspeed  # selecting the strategy needs it installed
def test_accelerator_arguments_select_deepspeed_and_expose_its_attributes(fresh_state):
    from drivetrain import Accelerator, DeepSpeedPlugin, DistributedType, get_active_deepspeed_plugin

    plugins = {"student": DeepSpeedPlugin(zero_stage=2, gradient_accumulation_steps=4),
               "teacher": DeepSpeedPlugin(zero_stage=3)}
    accelerator = Accelerator(deepspeed_plugins=plugins, mixed_precision="bf16")
    assert accelerator.distributed_type == DistributedType.DEEPSPEED
    assert accelerator.scaler is None and accelerator.gradient_accumulation_steps == 4
    state = accelerator.state
    assert get_active_deepspeed_plugin(state) is plugins["student"] is accelerator.deepspeed_plugin
    assert state.deepspeed_plugins == plugins and plugins["student"].selected
    assert plugins["teacher"].deepspeed_config["bf16"] == {"enabled": True}
    state.select_deepspeed_plugin("teacher")
    assert state.deepspeed_plugin is plugins["teacher"] and not plugins["student"].selected
    second = Accelerator()  # knows both plugins, as in Accelerate
    assert second.state.deepspeed_plugin is plugins["teacher"] and second.distributed_type == "DEEPSPEED"
    with pytest.raises(ValueError, match="no DeepSpeedPlugin named 'nope'; the run has 'student', 'teacher'"):
        state.select_deepspeed_plugin("nope")
    # as in Accelerate: only the state switches plugins, and a later Accelerator brings no new ones
    with pytest.raises(NotImplementedError, match="select_deepspeed_plugin"):
        plugins["student"].selected = True
    with pytest.raises(ValueError, match="select_deepspeed_plugin"):
        plugins["student"].select()
    with pytest.raises(NotImplementedError, match="give the first Accelerator every plugin"):
        Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=1))
    assert state.deepspeed_plugin is plugins["teacher"] and not plugins["student"].selected
    if importlib.util.find_spec("transformers") is not None:
        # transformers learns the active config: from_pretrained partitions under ZeRO-3 init
        from transformers.integrations import is_deepspeed_zero3_enabled
        from transformers.integrations.deepspeed import deepspeed_config

        assert is_deepspeed_zero3_enabled()  # the teacher: ZeRO-3, zero3_init_flag on by default
        state.select_deepspeed_plugin("student")
        assert not is_deepspeed_zero3_enabled()
        # transformers reads the selected config with the run's precision and, as Accelerate
        # hands it over, the batch values prepare() has not filled yet set to 1
        student = plugins["student"].hf_ds_config.config
        assert student["bf16"] == {"enabled": True} and student["train_batch_size"] == "auto"
        expected = {key: value for key, value in student.items() if key != "train_batch_size"}
        assert deepspeed_config() == {**expected, "train_micro_batch_size_per_gpu": 1}
        state.select_deepspeed_plugin("teacher")
    with accelerator.autocast():  # the engine owns the precision: no autocast on top
        import torch

        assert torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.float32
    with pytest.raises(ConfigError, match="with DeepSpeed, pass the optimizer to accelerator.prepare"):
        accelerator.prepare_optimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1))
    # a new state forgets the DeepSpeed attributes
    from drivetrain.state import AcceleratorState

    AcceleratorState._reset_state()
    plain = Accelerator()
    assert plain.state.deepspeed_plugin is None and plain.deepspeed_plugin is None  # as in Accelerate


@needs_deepspeed  # selecting the strategy needs it installed
def test_wrong_accelerator_arguments(fresh_state):
    from drivetrain import Accelerator, DeepSpeedPlugin

    with pytest.raises(ConfigError, match="deepspeed_plugin must be a DeepSpeedPlugin .*, not str"):
        Accelerator(deepspeed_plugin="zero3.json")
    from drivetrain.state import AcceleratorState

    AcceleratorState._reset_state()
    with pytest.raises(ConfigError, match="deepspeed_plugins must map names to DeepSpeedPlugin objects"):
        Accelerator(deepspeed_plugins={"zero_stage": 3})
    AcceleratorState._reset_state()
    with pytest.raises(ConfigError, match="pass deepspeed_plugin or deepspeed_plugins to the Accelerator, not both"):
        Accelerator(deepspeed_plugin=DeepSpeedPlugin(), deepspeed_plugins={"a": DeepSpeedPlugin()})


@needs_deepspeed
@pytest.mark.usefixtures("fresh_state", "private_group", "deepspeed_ops")
def test_one_process_engine_load_reads_its_model_states_once_and_reports_its_own_errors(monkeypatch, tmp_path):
    """The pre-load check's read of the model states file is what DeepSpeed loads; a keyword
    load_checkpoint does not take is refused before anything is read, and a TypeError raised
    inside DeepSpeed is reported as DeepSpeed's failure, not as a wrong keyword."""
    import torch
    import drivetrain_deepspeed.checkpoint as ds_checkpoint
    import drivetrain_deepspeed.fit as ds_fit

    from drivetrain import Accelerator, DeepSpeedPlugin
    from drivetrain.errors import CheckpointError

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=1))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=2)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    path = accelerator.save_state(tmp_path / "ckpt")
    accelerator.wait_for_everyone()

    reads: list[str] = []
    for module in (ds_checkpoint, ds_fit):
        def counting(file, *args, _load=module.safe_torch_load, **kwargs):
            reads.append(os.path.basename(file))
            return _load(file, *args, **kwargs)
        monkeypatch.setattr(module, "safe_torch_load", counting)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    changed = [p.detach().clone() for p in model.parameters()]
    accelerator.load_state(path)
    assert reads.count("mp_rank_00_model_states.pt") == 1, reads
    assert not any(torch.equal(a, p) for a, p in zip(changed, model.parameters()))  # it did load

    loaded = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(CheckpointError) as caught:
        accelerator.load_state(path, load_modul_strict=False)
    assert str(caught.value).startswith("load_state() got ['load_modul_strict'], which DeepSpeed's load_checkpoint "
                                        "does not take here; drop them (it takes ['custom_load_fn', ")
    with pytest.raises(CheckpointError) as caught:
        accelerator.load_state(path, custom_load_fn=lambda state, module: None)  # DeepSpeed passes src=, dst=
    message = str(caught.value)
    assert "DeepSpeed failed loading" in message and "TypeError" in message and "does not take" not in message
    assert "\n" not in message and "unexpected keyword argument 'src'" in message
    assert all(torch.equal(a, p) for a, p in zip(loaded, model.parameters()))


class _Line(__import__("torch").nn.Module):
    """y = a * x + b with scalar (0-dimensional) parameters, as transformers' test models."""

    def __init__(self):
        import torch

        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(0.0))
        self.b = torch.nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        return self.a * x + self.b


@pytest.mark.usefixtures("fresh_state", "private_group", "deepspeed_ops")
def test_scalar_parameters_train_under_zero_and_keep_their_shape(tmp_path):
    """DeepSpeed's start-up broadcast views each parameter as bytes, which torch refuses for a
    0-dimensional one; the engine is built, trains and checkpoints such a model."""
    import torch

    from drivetrain import Accelerator, DeepSpeedPlugin

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    model = _Line()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.linspace(-1, 1, 8)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, 3 * x + 1), batch_size=4)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    for inputs, targets in data:
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    trained = {name: p.detach().clone() for name, p in model.module.named_parameters()}
    assert all(p.dim() == 0 for p in trained.values()) and float(trained["a"]) > 0  # it learned the slope
    path = accelerator.save_state(tmp_path / "ckpt")
    with torch.no_grad():
        for parameter in model.module.parameters():
            parameter.zero_()
    accelerator.load_state(path)
    assert {name: float(p) for name, p in model.module.named_parameters()} == {
        name: float(p) for name, p in trained.items()}


# ------------------------------------------------------------------ launch options and launcher


@pytest.fixture
def launch_env(clean_env, tmp_path):
    clean_env.setenv("HOME", str(tmp_path / "home"))
    clean_env.setenv("HF_HOME", str(tmp_path / "hf"))
    clean_env.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    clean_env.chdir(tmp_path)
    return clean_env


def _resolved(*argv: str):
    from drivetrain.cli import launch_cmd
    from drivetrain.plugin_manager import get_plugin_manager

    parser = launch_cmd.build_parser()
    args = parser.parse_args(list(argv))
    launch_cmd.merge_config(args, parser)
    args.num_processes = args.num_processes or 1
    launch_cmd._defaults(args)
    selection = launch_cmd.resolve_choice(args, get_plugin_manager())
    return args, launch_cmd.child_environment(args, selection)


@needs_deepspeed  # selecting the strategy needs it installed
def test_launch_options_reach_the_children_and_are_checked_first(launch_env, tmp_path):
    args, env = _resolved("--cpu", "--num-processes", "2", "--use_deepspeed", "--zero-stage", "3",
                          "--offload-optimizer-device", "cpu", "--zero3-save-16bit-model", "true", "train.py")
    assert args.strategy == "deepspeed"
    assert env["DRIVETRAIN_STRATEGY"] == "deepspeed" and env["ACCELERATE_USE_DEEPSPEED"] == "true"
    assert env["DRIVETRAIN_DEEPSPEED_ZERO_STAGE"] == env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    assert env["ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"] == "cpu"
    assert env["ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"] == "true"
    from drivetrain.cli.launch_cmd import choose_launcher

    assert choose_launcher(args)[0] == "local"  # one machine: started without the elastic agent
    # the config file's block, and a broken DeepSpeed file refused before anything starts
    ds = _write(tmp_path / "ds.json", {"zero_optimization": {"stage": "auto"}, "gradient_clipping": "auto"})
    config = tmp_path / "cfg.yaml"
    config.write_text(f"distributed_type: DEEPSPEED\nnum_processes: 2\nuse_cpu: true\ndeepspeed_config:\n"
                      f"  deepspeed_config_file: {ds.name}\n  gradient_clipping: 0.5\n  zero3_init_flag: false\n"
                      f"  deepspeed_multinode_launcher: standard\n")
    args, env = _resolved("--config-file", str(config), "--zero-stage", "1", "train.py")
    assert args.strategy == "deepspeed" and env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == str(ds)
    assert env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "1" and env["ACCELERATE_GRADIENT_CLIPPING"] == "0.5"
    ds.write_text("{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        _resolved("--config-file", str(config), "train.py")


@needs_deepspeed  # selecting the strategy needs it installed
def test_deepspeed_launcher_is_used_when_the_config_asks_for_it(launch_env, tmp_path):
    from drivetrain.cli.launch_cmd import choose_launcher
    from drivetrain_deepspeed.launcher import environment_file, runner_arguments

    hostfile = tmp_path / "hostfile"
    hostfile.write_text("worker-0 slots=4\nworker-1 slots=4\n")
    args, _env = _resolved("--cpu", "--use-deepspeed", "--num-machines", "2", "--num-processes", "8",
                           "--main-process-ip", "10.0.0.1", "--main-process-port", "29600",
                           "--deepspeed-hostfile", str(hostfile), "train.py", "--lr", "1")
    assert choose_launcher(args)[0] == "deepspeed"
    assert runner_arguments(args) == [
        "--hostfile", str(hostfile), "--num_nodes", "2", "--num_gpus", "4", "--launcher", "pdsh",
        "--master_addr", "10.0.0.1", "--master_port", "29600", "--module", "--no_local_rank",
        "drivetrain.cli.child", "--script", "train.py", "--lr", "1"]
    for launcher in ("openmpi", "mvapich", "slurm"):
        args.deepspeed_multinode_launcher = launcher
        assert ["--launcher", launcher] == runner_arguments(args)[6:8]
    args.deepspeed_multinode_launcher = "nossh"
    args.machine_rank = 1
    assert runner_arguments(args)[6:9] == ["--no_ssh", "--node_rank", "1"]
    args.deepspeed_multinode_launcher, args.deepspeed_inclusion_filter = "pdsh", "worker-1:0,1"
    assert runner_arguments(args)[2:4] == ["--include", "worker-1:0,1"]
    args.deepspeed_exclusion_filter = "worker-0"
    with pytest.raises(ConfigError, match="not both"):
        runner_arguments(args)
    args.deepspeed_multinode_launcher = "standard"
    assert choose_launcher(args)[0] == "torchrun"  # standard: torchrun on each machine
    args.deepspeed_multinode_launcher, args.deepspeed_hostfile = "pdsh", None
    with pytest.raises(ConfigError, match="needs --deepspeed-hostfile"):
        runner_arguments(args)
    # variables for the remote hosts: the user's own file first, drivetrain's after
    (tmp_path / ".deepspeed_env").write_text("NCCL_IB_DISABLE=1\n")
    path = environment_file({"DRIVETRAIN_STRATEGY": "deepspeed", "HOME": "/x", "ACCELERATE_USE_DEEPSPEED": "true"},
                            str(tmp_path))
    assert Path(path).read_text().splitlines() == ["NCCL_IB_DISABLE=1", "ACCELERATE_USE_DEEPSPEED=true",
                                                   "DRIVETRAIN_STRATEGY=deepspeed"]


# ------------------------------------------------------------------ real engines, 2 processes


@needs_deepspeed
@pytest.mark.multiprocess
@pytest.mark.timeout(1800)
def test_every_zero_stage_trains_like_ddp_and_resumes_exactly(deepspeed_ops, tmp_path):
    # one launch for the three stages: the processes and the DDP reference are made once
    result = launch("check_deepspeed.py", "1,2,3", str(tmp_path), timeout=1200,
                    env={**deepspeed_ops, "HF_HOME": str(tmp_path / "hf")})
    assert_ok(result)
    for stage in (1, 2, 3):
        assert result.stdout.count(f"CHECK-DEEPSPEED-OK stage {stage}") == 2, result.stdout


@needs_deepspeed
@pytest.mark.multiprocess
@pytest.mark.timeout(1800)
def test_config_file_with_auto_values_through_deepspeeds_launcher(deepspeed_ops, tmp_path):
    ds = dict(ZERO3_OFFLOAD)
    ds["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "betas": "auto"}}
    ds["zero_optimization"] = {"stage": "auto", "offload_optimizer": {"device": "auto"},
                               "stage3_gather_16bit_weights_on_model_save": "auto"}
    ds_file = _write(tmp_path / "ds.json", ds)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\n")
    config = tmp_path / "cfg.yaml"
    config.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 2\nnum_machines: 1\n"
        "use_cpu: true\nmixed_precision: 'no'\nfsdp_config: {}\ndeepspeed_config:\n"
        f"  deepspeed_config_file: {ds_file}\n  zero3_init_flag: false\n  deepspeed_hostfile: {hostfile}\n"
        "  deepspeed_multinode_launcher: pdsh\n")
    result = launch("check_deepspeed_config.py", timeout=900,
                    launch_args=("--config-file", str(config), "--zero-stage", "2", "--offload-optimizer-device",
                                 "cpu", "--gradient-clipping", "0.5", "--gradient-accumulation-steps", "2"),
                    env={**deepspeed_ops, "HF_HOME": str(tmp_path / "hf")})
    assert_ok(result)
    assert result.stdout.count("CHECK-DEEPSPEED-CONFIG-OK") == 2, result.stdout


ONE_PROCESS_SCRIPT = """
import torch
from drivetrain import Accelerator, DeepSpeedPlugin
plugin = DeepSpeedPlugin(zero_stage=2)
plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = 8
accelerator = Accelerator(deepspeed_plugin=plugin)
model = torch.nn.Linear(4, 2)
model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
accelerator.backward(model(torch.randn(8, 4, device=accelerator.device)).sum())
optimizer.step()
print("ONE-PROCESS-DEEPSPEED-OK", accelerator.num_processes, accelerator.distributed_type, flush=True)
"""


@needs_deepspeed
@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_one_process_under_plain_torchrun_joins_the_agents_rendezvous(deepspeed_ops, tmp_path):
    # Its group used to open a private tcp:// address, which under torchrun waits for the
    # agent's store at that address: forever. It must join torchrun's own rendezvous.
    script = tmp_path / "one.py"
    script.write_text(ONE_PROCESS_SCRIPT)
    env = clean_environ()
    env.update(deepspeed_ops, HF_HOME=str(tmp_path / "hf"))
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # torchrun's default static rendezvous (not --standalone): the agent's store serves the workers
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
                             "--master-port", str(port), str(script)], capture_output=True, text=True, env=env,
                            timeout=300)
    assert_ok(result)
    assert "ONE-PROCESS-DEEPSPEED-OK 1 DistributedType.DEEPSPEED" in result.stdout, result.stdout
