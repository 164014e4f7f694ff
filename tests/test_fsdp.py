"""The fsdp strategy plugin: options, config, launch, refusals (in this process), and real
2-process training, checkpoints and merge-weights with FSDP1 and FSDP2 (launched)."""

from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from conftest import clean_environ

from drivetrain.errors import CheckpointError, ConfigError, DrivetrainError

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "check_fsdp.py"


# ------------------------------------------------------------------ options


def test_defaults_follow_accelerate(clean_env):
    from drivetrain import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin()
    assert (plugin.fsdp_version, plugin.sharding_strategy, plugin.reshard_after_forward) == (1, "FULL_SHARD", None)
    assert (plugin.auto_wrap_policy, plugin.state_dict_type, plugin.backward_prefetch) == (
        "NO_WRAP", "FULL_STATE_DICT", "BACKWARD_PRE")
    assert plugin.use_orig_params and not plugin.sync_module_states and not plugin.cpu_offload
    assert plugin.state_dict_config.offload_to_cpu and plugin.state_dict_config.rank0_only
    v2 = FullyShardedDataParallelPlugin(fsdp_version=2)
    assert v2.state_dict_type == "SHARDED_STATE_DICT" and v2.backward_prefetch is None and v2.prefetches_in_backward


def test_environment_variables_of_both_names(clean_env):
    from drivetrain import FullyShardedDataParallelPlugin

    clean_env.setenv("FSDP_VERSION", "2")
    clean_env.setenv("FSDP_SHARDING_STRATEGY", "2")  # Accelerate's numbers
    clean_env.setenv("DRIVETRAIN_FSDP_AUTO_WRAP_POLICY", "transformer_based_wrap")
    clean_env.setenv("FSDP_TRANSFORMER_CLS_TO_WRAP", "Block, Layer")
    clean_env.setenv("FSDP_OFFLOAD_PARAMS", "false")
    clean_env.setenv("FSDP_CPU_RAM_EFFICIENT_LOADING", "true")
    clean_env.setenv("FSDP_MIN_NUM_PARAMS", "2000")
    plugin = FullyShardedDataParallelPlugin()
    assert (plugin.fsdp_version, plugin.sharding_strategy, plugin.reshard_after_forward) == (2, None, False)
    assert plugin.resolved_sharding_strategy == "SHARD_GRAD_OP"
    assert plugin.auto_wrap_policy == "TRANSFORMER_BASED_WRAP" and plugin.transformer_cls_names_to_wrap == ["Block", "Layer"]
    assert plugin.cpu_ram_efficient_loading and plugin.sync_module_states and plugin.min_num_params == 2000
    # arguments win over the environment
    assert FullyShardedDataParallelPlugin(sharding_strategy="NO_SHARD").resolved_sharding_strategy == "NO_SHARD"
    clean_env.setenv("DRIVETRAIN_FSDP_VERSION", "1")
    with pytest.raises(ConfigError, match="DRIVETRAIN_FSDP_VERSION='1' and FSDP_VERSION='2' disagree"):
        FullyShardedDataParallelPlugin()


def test_reshard_after_forward_and_sharding_strategy_are_one_choice(clean_env):
    from drivetrain import FullyShardedDataParallelPlugin

    v2 = FullyShardedDataParallelPlugin(fsdp_version=2, reshard_after_forward=False)
    assert v2.resolved_sharding_strategy == "SHARD_GRAD_OP" and v2.sharding_strategy is None  # as in Accelerate
    v1 = FullyShardedDataParallelPlugin(reshard_after_forward="HYBRID_SHARD_ZERO2")
    assert v1.sharding_strategy == "HYBRID_SHARD_ZERO2" and v1.reshard_after_forward is None
    hybrid = FullyShardedDataParallelPlugin(fsdp_version=2, sharding_strategy="HYBRID_SHARD")
    assert hybrid.resolved_sharding_strategy == "HYBRID_SHARD" and hybrid.reshard_after_forward is True
    with pytest.raises(ConfigError, match="reshard_after_forward.*is True but sharding_strategy SHARD_GRAD_OP keeps"):
        FullyShardedDataParallelPlugin(sharding_strategy="SHARD_GRAD_OP", reshard_after_forward=True)
    from torch.distributed.fsdp import ShardingStrategy

    assert FullyShardedDataParallelPlugin(sharding_strategy=ShardingStrategy.NO_SHARD).sharding_strategy == "NO_SHARD"


@pytest.mark.parametrize("kwargs, message", [
    (dict(fsdp_version=3), "use 1 .* or 2"),
    (dict(sharding_strategy="ZERO3"), "allowed: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD"),
    (dict(fsdp_version=2, state_dict_type="LOCAL_STATE_DICT"), "FSDP2 does not have; use SHARDED_STATE_DICT"),
    (dict(cpu_ram_efficient_loading=True, sync_module_states=False), "needs sync_module_states"),
    (dict(auto_wrap_policy="LAYER_WRAP"), "allowed: TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP"),
    (dict(min_num_params="many"), "whole number"),
    (dict(ignored_modules="blocks.("), "not a valid regular expression"),
    (dict(mixed_precision_policy={"param_dtype": "int8"}), "use bf16, fp16 or fp32"),
    (dict(use_orig_params="maybe"), "true or false"),
])
def test_impossible_options_are_refused_with_the_fix(clean_env, kwargs, message):
    from drivetrain import FullyShardedDataParallelPlugin

    with pytest.raises(ConfigError, match=message):
        FullyShardedDataParallelPlugin(**kwargs)


def test_mixed_precision_and_state_dict_type_setters(clean_env):
    from drivetrain import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    plugin.set_mixed_precision("bf16")  # FSDP2 casts the outputs, FSDP1 the buffers (as in Accelerate)
    assert plugin.mixed_precision_policy == {"param_dtype": "bfloat16", "reduce_dtype": "bfloat16",
                                             "output_dtype": "bfloat16"}
    plugin.set_mixed_precision("fp16")  # an existing policy is kept unless overridden
    assert plugin.mixed_precision_policy["param_dtype"] == "bfloat16"
    plugin.set_state_dict_type("FULL_STATE_DICT")
    assert plugin.state_dict_type == "FULL_STATE_DICT"


def test_resolved_options_equal_the_torch_objects_accelerate_holds(clean_env, caplog):
    """Accelerate's plugin holds torch objects after construction and code compares with them;
    ours holds names and flags (resolved without torch) that are equal to both."""
    from torch.distributed.fsdp import (BackwardPrefetch, CPUOffload, CPUOffloadPolicy, MixedPrecision,
                                        MixedPrecisionPolicy, OffloadPolicy, ShardingStrategy, StateDictType)

    from drivetrain import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(sharding_strategy=3, backward_prefetch=BackwardPrefetch.BACKWARD_POST,
                                            cpu_offload=True, mixed_precision_policy="fp16")
    assert plugin.sharding_strategy == ShardingStrategy.NO_SHARD == plugin.sharding_strategy
    assert plugin.sharding_strategy != ShardingStrategy.FULL_SHARD and plugin.sharding_strategy == "NO_SHARD"
    assert plugin.backward_prefetch == BackwardPrefetch.BACKWARD_POST
    assert plugin.cpu_offload == CPUOffload(offload_params=True) and plugin.cpu_offload != CPUOffload()
    assert plugin.mixed_precision_policy == MixedPrecision(torch.float16, torch.float16, torch.float16)
    assert plugin.mixed_precision_policy != MixedPrecision(torch.float16, torch.float16, torch.float32)
    assert plugin.state_dict_type == StateDictType.FULL_STATE_DICT
    assert FullyShardedDataParallelPlugin(sharding_strategy=5).sharding_strategy == ShardingStrategy._HYBRID_SHARD_ZERO2
    zero2 = FullyShardedDataParallelPlugin(sharding_strategy=ShardingStrategy._HYBRID_SHARD_ZERO2)
    assert zero2.sharding_strategy == "HYBRID_SHARD_ZERO2"
    assert FullyShardedDataParallelPlugin(backward_prefetch="NO_PREFETCH").backward_prefetch is None
    with caplog.at_level("WARNING"):
        local = FullyShardedDataParallelPlugin(state_dict_type="LOCAL_STATE_DICT")
    assert local.state_dict_type == StateDictType.LOCAL_STATE_DICT and local.writes_sharded_state
    assert "LOCAL_STATE_DICT is written as SHARDED_STATE_DICT" in caplog.text
    v2 = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_offload=False, mixed_precision_policy="bf16")
    assert v2.cpu_offload == OffloadPolicy() and v2.cpu_offload != CPUOffloadPolicy()
    assert FullyShardedDataParallelPlugin(fsdp_version=2, cpu_offload=True).cpu_offload == CPUOffloadPolicy()
    assert v2.mixed_precision_policy == MixedPrecisionPolicy(torch.bfloat16, torch.bfloat16, torch.bfloat16)
    caplog.clear()
    with caplog.at_level("WARNING"):  # FSDP2 always prefetches: a policy is dropped with a warning
        post = FullyShardedDataParallelPlugin(fsdp_version=2, backward_prefetch="BACKWARD_POST")
    assert post.backward_prefetch is None and post.prefetches_in_backward
    assert "backward_prefetch is not supported in FSDP2" in caplog.text
    off = FullyShardedDataParallelPlugin(fsdp_version=2, backward_prefetch="NO_PREFETCH")
    assert off.backward_prefetch is None and not off.prefetches_in_backward


def test_set_auto_wrap_policy_makes_torchs_callable_for_the_model(clean_env):
    import functools

    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy, transformer_auto_wrap_policy

    from drivetrain import FullyShardedDataParallelPlugin

    class Layer(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Layer(4, 4), Layer(4, 4))
    model._no_split_modules = ["Layer"]
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP")
    plugin.set_auto_wrap_policy(model)
    assert isinstance(plugin.auto_wrap_policy, functools.partial)
    assert plugin.auto_wrap_policy.func is transformer_auto_wrap_policy
    assert plugin.auto_wrap_policy.keywords["transformer_layer_cls"] == {Layer}
    sized = FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=2000)
    sized.set_auto_wrap_policy(model)
    assert sized.auto_wrap_policy.func is size_based_auto_wrap_policy
    for kwargs in (dict(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=0), dict(auto_wrap_policy="NO_WRAP")):
        nothing = FullyShardedDataParallelPlugin(**kwargs)
        nothing.set_auto_wrap_policy(model)
        assert nothing.auto_wrap_policy is None
    missing = FullyShardedDataParallelPlugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP",
                                             transformer_cls_names_to_wrap="T5Layer")
    with pytest.raises(ConfigError, match="Could not find the transformer layer class T5Layer in the model"):
        missing.set_auto_wrap_policy(model)


def test_compile_regions_fsdp2_compiles_in_place_keeping_block_classes():
    from drivetrain.utils import compile_regions_fsdp2

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([Block() for _ in range(3)])
    model.head = torch.nn.Linear(4, 2)
    assert compile_regions_fsdp2(model) is model
    assert all(type(block) is Block and block._compiled_call_impl is not None for block in model.layers)
    assert model.head._compiled_call_impl is not None and getattr(model, "_compiled_call_impl", None) is None


# ------------------------------------------------------------ the kernel's names


def test_public_names_enum_and_selection_through_the_kernel(clean_env):
    import drivetrain
    from drivetrain import DistributedType
    from drivetrain.plugin_manager import get_plugin_manager
    from drivetrain.selection.choice import requests_from_env

    assert drivetrain.FullyShardedDataParallelPlugin.__module__ == "drivetrain_fsdp.options"
    assert callable(drivetrain.merge_fsdp_weights)
    assert DistributedType.FSDP == "FSDP" and "FSDP" in DistributedType
    manager = get_plugin_manager()
    assert requests_from_env(manager, {"ACCELERATE_USE_FSDP": "true"}).strategy == "fsdp"
    assert requests_from_env(manager, {"DRIVETRAIN_USE_FSDP": "1"}).strategy == "fsdp"
    spec = dict((s.name, s) for _p, s in manager.registrations("drivetrain_register_strategies"))["fsdp"]
    assert spec.accelerator_arguments == ("fsdp_plugin",) and spec.places_models and not spec.automatic


@pytest.mark.usefixtures("fresh_state")
def test_accelerator_argument_selects_fsdp_and_refuses_offload_on_cpu(clean_env):
    from drivetrain import Accelerator, FullyShardedDataParallelPlugin

    expected = ("FSDP CPU offload (cpu_offload / fsdp_offload_params) moves parameters from an accelerator to CPU "
                "memory, but this run's platform is 'cpu', where they are in CPU memory already (torch's offloading "
                "also needs an accelerator to exist); remove the option, or run on an accelerator")
    with pytest.raises(ConfigError) as refused:  # cpu=True: the platform is the CPU on a GPU machine too
        Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(cpu_offload=True))
    assert str(refused.value) == expected


@pytest.mark.usefixtures("fresh_state", "private_group")
def test_one_process_fsdp_trains_and_exposes_its_options(clean_env):
    from drivetrain import Accelerator, FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    accelerator = Accelerator(fsdp_plugin=plugin)
    assert accelerator.distributed_type == "FSDP" and accelerator.state.fsdp_plugin is plugin
    assert accelerator.is_fsdp2
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert type(next(model.parameters())).__name__ == "DTensor"
    accelerator.backward(model(torch.randn(3, 4).to(accelerator.device)).sum())
    grads = [p.grad.full_tensor().clone() for p in model.parameters()]
    with pytest.raises(DrivetrainError, match=r"^FSDP cannot clip gradients by value; use "
                                              r"accelerator.clip_grad_norm_ instead$"):
        accelerator.clip_grad_value_(model.parameters(), 1e-4)  # refused as in Accelerate, nothing clipped
    assert all(torch.equal(g, p.grad.full_tensor()) for g, p in zip(grads, model.parameters()))
    norm = accelerator.clip_grad_norm_(model.parameters(), 0.5)
    assert type(norm) is torch.Tensor and norm > 0
    optimizer.step()
    state = accelerator.get_state_dict(model)
    assert set(state) == {"0.weight", "0.bias", "2.weight", "2.bias"} and type(state["0.weight"]) is torch.Tensor


@pytest.mark.usefixtures("fresh_state", "private_group")
@pytest.mark.parametrize("mixed_precision", ["bf16", "no"])
def test_fsdp2_keeps_fp32_master_weights_of_a_mixed_dtype_model_under_mixed_precision(clean_env, mixed_precision):
    """FSDP2 wants one original dtype per unit; a bf16 model with fp32 norms trains under mixed
    precision with fp32 master weights, and without mixed precision its dtypes are left alone."""
    from drivetrain import Accelerator, FullyShardedDataParallelPlugin

    accelerator = Accelerator(mixed_precision=mixed_precision, fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    model[0].to(torch.bfloat16)
    if mixed_precision == "no":
        model[1].to(torch.bfloat16)  # uniform, as FSDP2 needs without a policy
    model = accelerator.prepare(model)
    expected = {torch.float32} if mixed_precision == "bf16" else {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == expected
    out = model(torch.randn(2, 4, dtype=torch.float32 if mixed_precision == "bf16" else torch.bfloat16))
    assert out.dtype == torch.bfloat16  # the compute dtype: the policy's, or the weights'


@pytest.mark.usefixtures("fresh_state", "private_group")
@pytest.mark.parametrize("state_dict_type", ["SHARDED_STATE_DICT", "FULL_STATE_DICT"])
def test_one_process_fsdp_load_checks_every_model_before_loading_any(clean_env, tmp_path, state_dict_type):
    from drivetrain import Accelerator, FullyShardedDataParallelPlugin

    def models(hidden):
        return (torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)),
                torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)))

    def accelerator():
        return Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type=state_dict_type))

    torch.manual_seed(0)
    saver = accelerator()
    saver.prepare(*models(8))
    saver.save_state(tmp_path / "ckpt")
    saver.wait_for_everyone()

    torch.manual_seed(1)  # other weights: a load of model 0 would change them
    loader = accelerator()
    first, second = loader.prepare(*models(16))  # the second model does not fit the checkpoint
    before = [p.full_tensor().clone() for p in first.parameters()]
    with pytest.raises(CheckpointError) as caught:
        loader.load_state(tmp_path / "ckpt")
    message = str(caught.value)
    assert "\n" not in message and "model_1 does not fit: 0.weight is (8, 4) torch.float32 in the checkpoint but " \
                                   "(16, 4) torch.float32 here" in message
    assert all(torch.equal(b, p.full_tensor()) for b, p in zip(before, first.parameters()))


# ------------------------------------------------------------ config and launch


def test_config_file_block_with_accelerate_keys(tmp_path):
    from drivetrain.config import config_from_dict

    data = {"distributed_type": "FSDP", "num_processes": 2, "fsdp_config": {
        "fsdp_version": 2, "fsdp_reshard_after_forward": True, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": "BertLayer", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_offload_params": False, "fsdp_cpu_ram_efficient_loading": True, "fsdp_sync_module_states": True,
        "fsdp_use_orig_params": True, "fsdp_activation_checkpointing": False}}
    config = config_from_dict(data)
    assert config.sections["fsdp_config"]["fsdp_reshard_after_forward"] is True
    v1 = config_from_dict({"distributed_type": "FSDP", "num_processes": 2, "fsdp_config": {
        "fsdp_version": 1, "fsdp_reshard_after_forward": "SHARD_GRAD_OP", "fsdp_backward_prefetch_policy": "BACKWARD_PRE"}})
    assert v1.sections["fsdp_config"]["fsdp_reshard_after_forward"] == "SHARD_GRAD_OP"
    with pytest.raises(ConfigError, match=r"fsdp_config.fsdp_sharding_stratgy \(did you mean 'fsdp_sharding_strategy'"):
        config_from_dict({"distributed_type": "FSDP", "fsdp_config": {"fsdp_sharding_stratgy": "FULL_SHARD"}})
    with pytest.raises(ConfigError, match="fsdp_state_dict_type is 'LOCAL'"):
        config_from_dict({"distributed_type": "FSDP", "fsdp_config": {"fsdp_state_dict_type": "LOCAL"}})


def _launch_env(argv, config_text=None, tmp_path=None):
    from drivetrain.cli.launch_cmd import build_parser, child_environment, merge_config, resolve_choice
    from drivetrain.plugin_manager import get_plugin_manager

    if config_text is not None:
        path = tmp_path / "config.yaml"
        path.write_text(config_text)
        argv = ["--config-file", str(path), *argv]
    parser = build_parser()
    args = parser.parse_args([*argv, "script.py"])
    merge_config(args, parser)
    args.num_processes = args.num_processes or 2
    args.num_machines, args.machine_rank, args.nproc_per_node = 1, 0, args.num_processes
    selection = resolve_choice(args, get_plugin_manager())
    return child_environment(args, selection)


def test_launch_options_reach_the_children(clean_env, tmp_path):
    clean_env.setenv("DRIVETRAIN_CONFIG_FILE", str(tmp_path / "none.yaml"))
    (tmp_path / "none.yaml").write_text("{}\n")
    env = _launch_env(["--cpu", "--use_fsdp", "--fsdp-version", "2", "--fsdp_sharding_strategy", "SHARD_GRAD_OP",
                       "--fsdp-offload-params", "false", "--fsdp-transformer-layer-cls-to-wrap", "Block"])
    assert env["DRIVETRAIN_STRATEGY"] == "fsdp" and env["ACCELERATE_STRATEGY"] == "fsdp"
    assert env["FSDP_VERSION"] == env["DRIVETRAIN_FSDP_VERSION"] == "2"
    assert env["FSDP_SHARDING_STRATEGY"] == "SHARD_GRAD_OP" and env["FSDP_OFFLOAD_PARAMS"] == "false"
    assert env["FSDP_TRANSFORMER_CLS_TO_WRAP"] == "Block"
    with pytest.raises(ConfigError, match="needs sync_module_states"):
        _launch_env(["--cpu", "--use-fsdp", "--fsdp-cpu-ram-efficient-loading", "true",
                     "--fsdp-sync-module-states", "false"])
    assert "FSDP_VERSION" not in _launch_env(["--cpu", "--fsdp-version", "2"])  # FSDP not selected


def test_config_file_selects_fsdp_and_fills_its_variables(clean_env, tmp_path):
    env = _launch_env(["--cpu"], "distributed_type: FSDP\nnum_processes: 2\nuse_cpu: true\nfsdp_config:\n"
                                 "  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n"
                                 "  fsdp_state_dict_type: FULL_STATE_DICT\n", tmp_path)
    assert env["DRIVETRAIN_STRATEGY"] == "fsdp"
    assert env["FSDP_RESHARD_AFTER_FORWARD"] == "false" and env["FSDP_STATE_DICT_TYPE"] == "FULL_STATE_DICT"
    assert env["FSDP_VERSION"] == "2"
    # the command line wins over the file
    env = _launch_env(["--cpu", "--fsdp-state-dict-type", "SHARDED_STATE_DICT"],
                      "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_state_dict_type: FULL_STATE_DICT\n",
                      tmp_path)
    assert env["FSDP_STATE_DICT_TYPE"] == "SHARDED_STATE_DICT"


# ------------------------------------------------------------ checkpoint safety


def test_metadata_that_would_run_code_is_refused(tmp_path):
    from drivetrain_fsdp.merge import merge_fsdp_weights

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / ".metadata").write_bytes(pickle.dumps(Boom()))
    with pytest.raises(CheckpointError, match="refers to .*system.*it may run code"):
        merge_fsdp_weights(tmp_path / "ckpt", tmp_path / "out")
    assert not (tmp_path / "pwned").exists()


def test_merge_weights_explains_what_it_needs(cli, tmp_path):
    result = cli("merge-weights", str(tmp_path), str(tmp_path / "o"))
    assert result.returncode == 2 and "is not a sharded FSDP checkpoint" in result.stderr, result.stderr


def test_discovery_does_not_import_torch():
    code = ("import sys\nimport drivetrain_fsdp.plugin\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr


# ------------------------------------------------------------ real processes


def _load_script():
    spec = importlib.util.spec_from_file_location("check_fsdp", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.multiprocess
@pytest.mark.usefixtures("fresh_state", "private_group")
def test_fsdp_on_two_processes_then_one(tmp_path, cli):
    """FSDP1 and FSDP2, one after the other in one launch: FULL_SHARD and SHARD_GRAD_OP match
    DDP; checkpoints resume exactly; the 2-process sharded checkpoint loads in 1 process (this
    one) and merges into a plain model."""
    from launching import assert_ok, launch
    from safetensors.torch import load_file

    result = launch(SCRIPT, "1,2", str(tmp_path))
    assert_ok(result)
    assert result.stdout.count("CHECK-FSDP-OK") == 2

    script = _load_script()
    for version in (1, 2):
        own = tmp_path / f"fsdp{version}"
        merged = own / "merged"
        merging = cli("merge-weights", str(own / "sharded"), str(merged))
        assert merging.returncode == 0, merging.stderr
        assert sorted(os.listdir(merged)) == ["model.safetensors"]
        expected = load_file(own / "expected.safetensors")
        model = script.TinyTransformer()
        model.load_state_dict(load_file(merged / "model.safetensors"))
        with torch.no_grad():
            torch.testing.assert_close(model(expected["ids"][:, :-1]), expected["logits"], rtol=0, atol=0,
                                       msg=f"FSDP{version}")

    for version in (1, 2):
        script.single_process(version, str(tmp_path / f"fsdp{version}"))


@pytest.mark.multiprocess
def test_launch_carries_config_file_and_flags_to_the_processes(tmp_path):
    from launching import assert_ok, launch

    config = tmp_path / "fsdp.yaml"
    config.write_text("distributed_type: FSDP\nnum_processes: 2\nuse_cpu: true\nfsdp_config:\n  fsdp_version: 1\n"
                      "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_state_dict_type: FULL_STATE_DICT\n"
                      "  fsdp_reshard_after_forward: FULL_SHARD\n")
    result = launch(SCRIPT, "2", str(tmp_path), "--from-launch", launch_args=(
        "--config-file", str(config), "--fsdp_version", "2", "--fsdp-sharding-strategy", "SHARD_GRAD_OP",
        "--fsdp-reshard-after-forward", "false"))
    assert_ok(result)
    assert result.stdout.count("CHECK-FSDP-OK") == 2


def test_new_configs_use_fsdp2():
    import io

    from drivetrain.config import config_from_dict
    from drivetrain.config.questionnaire import Asker, run_questionnaire

    answers = "cpu\n1\n2\nfsdp\nbf16\nno\n" + "\n" * 20  # platform, machines, processes, strategy, ...
    data = run_questionnaire(Asker(io.StringIO(answers), io.StringIO()))
    assert data["distributed_type"] == "FSDP" and data["fsdp_config"]["fsdp_version"] == 2
    assert data["fsdp_config"]["fsdp_sharding_strategy"] == "FULL_SHARD"
    config_from_dict(data)  # and the file it writes reads back


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CPU offload moves parameters off an accelerator; none here")
@pytest.mark.parametrize("version", [1, 2])
def test_cpu_offload_on_an_accelerator(version, tmp_path):
    env = clean_environ()
    result = subprocess.run([sys.executable, "-m", "drivetrain", "launch", "--num-processes", "1", str(SCRIPT),
                             str(version), str(tmp_path), "--offload"], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CHECK-FSDP-OK" in result.stdout



def test_merge_weights_refuses_an_output_that_removing_the_checkpoint_would_delete(tmp_path, monkeypatch):
    import torch.distributed.checkpoint as dcp

    from drivetrain.cli.main import main

    checkpoint = tmp_path / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no process group: DCP warns that it saves in one process
        dcp.save({"w": torch.ones(2, 2)}, checkpoint_id=str(checkpoint / "model_0"), no_dist=True)
    monkeypatch.chdir(tmp_path)
    assert main(["merge-weights", "ckpt", "ckpt/merged", "--remove-checkpoint-dir"]) == 2
    assert (checkpoint / "model_0" / ".metadata").exists() and not (checkpoint / "merged").exists()
    (tmp_path / "out.txt").write_text("mine")
    assert main(["merge-weights", "ckpt", "out.txt"]) == 2 and (tmp_path / "out.txt").read_text() == "mine"
    assert main(["merge-weights", "ckpt", "merged", "--remove-checkpoint-dir"]) == 0
    assert (tmp_path / "merged" / "model.safetensors").exists() and not checkpoint.exists()
