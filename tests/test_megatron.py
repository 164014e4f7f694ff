"""The megatron_lm strategy's contract: options, launch options, selection, and the refusal that
names what a Megatron-LM train step needs and this machine lacks (see drivetrain_megatron/engine.py)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from drivetrain.errors import ConfigError


def _found(module: str) -> bool:
    try:  # find_spec imports the parent package, which may be missing
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


# Without megatron-core the plugin is listed as unavailable, and selecting it names the extra.
needs_core = pytest.mark.skipif(importlib.util.find_spec("megatron") is None, reason="megatron-core is not installed")


def test_options_defaults_environment_and_checks(clean_env):
    from drivetrain import MegatronLMPlugin

    plugin = MegatronLMPlugin()
    assert (plugin.tp_degree, plugin.pp_degree, plugin.num_micro_batches, plugin.gradient_clipping) == (1, 1, 1, 1.0)
    assert not (plugin.sequence_parallelism or plugin.recompute_activations or plugin.use_distributed_optimizer)
    clean_env.setenv("MEGATRON_LM_TP_DEGREE", "2")
    clean_env.setenv("DRIVETRAIN_MEGATRON_LM_SEQUENCE_PARALLELISM", "true")
    clean_env.setenv("MEGATRON_LM_RECOMPUTE_ACTIVATIONS", "1")
    plugin = MegatronLMPlugin(pp_degree=2)
    assert (plugin.tp_degree, plugin.pp_degree, plugin.sequence_parallelism, plugin.recompute_activations) == (
        2, 2, True, True)
    assert plugin.megatron_lm_default_args["tensor_model_parallel_size"] == 2
    assert plugin.megatron_lm_default_args["recompute_granularity"] == "selective"
    assert plugin.data_parallel_degree(8) == 2
    with pytest.raises(ConfigError, match=r"tp_degree=2 × pp_degree=2 = 4 does not divide the 6 processes"):
        plugin.data_parallel_degree(6)
    assert plugin.environment()["MEGATRON_LM_SEQUENCE_PARALLELISM"] == "true"


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp_degree=0), "tp_degree must be at least 1"),
    (dict(tp_degree=1, sequence_parallelism=True), "sequence_parallelism .* needs tp_degree > 1"),
    (dict(gradient_clipping="strong"), "gradient_clipping is 'strong', which is not a number"),
    (dict(lr_decay_style="step"), "lr_decay_style 'step' is not one of"),
    (dict(num_layers_per_virtual_pipeline_stage=2), "needs pp_degree > 1"),
])
def test_bad_options_are_refused(clean_env, kwargs, message):
    from drivetrain import MegatronLMPlugin

    with pytest.raises(ConfigError, match=message):
        MegatronLMPlugin(**kwargs)


@needs_core
def test_names_enum_and_selection(clean_env):
    import drivetrain.utils
    from drivetrain import DistributedType
    from drivetrain.plugin_manager import get_plugin_manager
    from drivetrain.selection.choice import requests_from_env

    assert DistributedType.MEGATRON_LM == "MEGATRON_LM"
    for name in ("MegatronLMPlugin", "MegatronEngine", "GPTTrainStep", "BertTrainStep", "T5TrainStep",
                 "MegatronLMDummyDataLoader", "MegatronLMDummyScheduler", "avg_losses_across_data_parallel_group",
                 "gather_across_data_parallel_groups"):
        assert getattr(drivetrain.utils, name).__module__.startswith("drivetrain_megatron.")
    manager = get_plugin_manager()
    assert requests_from_env(manager, {"ACCELERATE_USE_MEGATRON_LM": "true"}).strategy == "megatron_lm"
    loader = drivetrain.utils.MegatronLMDummyDataLoader(data_path=["corpus"], seq_length=128)
    assert loader.set_megatron_data_args() == {"data_path": ["corpus"], "seq_length": 128}
    assert drivetrain.utils.MegatronLMDummyScheduler(None, total_num_steps=10, warmup_num_steps=2).total_num_steps == 10


@needs_core
def test_refusal_names_what_is_missing(clean_env):
    from drivetrain_megatron.engine import missing_requirements, refusal

    missing = missing_requirements("cpu")
    assert any("CUDA devices (this run's platform is 'cpu'" in item for item in missing)
    assert any("megatron.training" in item for item in missing)  # Megatron-LM's package is not on PyPI
    message = str(refusal("cpu"))
    assert message.startswith("the megatron_lm strategy needs ") and "ParallelismConfig(tp_size=...)" in message
    from drivetrain import GPTTrainStep
    from drivetrain.utils import is_megatron_lm_available

    with pytest.raises(ConfigError, match="GPTTrainStep: the megatron_lm strategy needs"):
        GPTTrainStep(None, None)
    assert is_megatron_lm_available() is False  # not requested
    clean_env.setenv("ACCELERATE_USE_MEGATRON_LM", "true")
    assert is_megatron_lm_available() is _found("megatron.training")


@needs_core
@pytest.mark.usefixtures("fresh_state")
def test_accelerator_refuses_on_the_cpu_before_training(clean_env):
    from drivetrain import Accelerator, MegatronLMPlugin

    with pytest.raises(ConfigError, match=r"the megatron_lm strategy needs .*CUDA devices"):
        Accelerator(cpu=True, megatron_lm_plugin=MegatronLMPlugin())


@needs_core
def test_launch_options_are_checked_before_any_process_starts(clean_env, tmp_path):
    from drivetrain.cli.launch_cmd import build_parser, child_environment, merge_config, resolve_choice
    from drivetrain.plugin_manager import get_plugin_manager

    (tmp_path / "config.yaml").write_text("{}\n")
    parser = build_parser()
    args = parser.parse_args(["--config-file", str(tmp_path / "config.yaml"), "--cpu", "--num_processes", "2",
                              "--use_megatron_lm", "--megatron_lm_tp_degree", "2",
                              "--megatron-lm-sequence-parallelism", "true", "script.py"])
    merge_config(args, parser)
    args.num_machines, args.machine_rank, args.nproc_per_node = 1, 0, 2
    assert args.megatron_lm_tp_degree == 2 and args.megatron_lm_sequence_parallelism is True
    selection = resolve_choice(args, get_plugin_manager())
    assert selection.strategy.name == "megatron_lm"
    with pytest.raises(ConfigError, match=r"needs .*CUDA devices \(this run's platform is 'cpu'"):
        child_environment(args, selection)


def test_data_parallel_helpers_on_megatron_core_groups(clean_env):
    parallel_state = pytest.importorskip("megatron.core.parallel_state", reason="megatron-core is not installed")
    import torch.distributed as dist

    from drivetrain import avg_losses_across_data_parallel_group, gather_across_data_parallel_groups

    existed = dist.is_initialized()
    if not existed:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)
        averaged = avg_losses_across_data_parallel_group([torch.tensor(2.0), torch.tensor(4.0)])
        assert torch.equal(averaged, torch.tensor([2.0, 4.0]))
        gathered = gather_across_data_parallel_groups({"a": torch.arange(3), "b": torch.tensor(1.0)})
        assert torch.equal(gathered["a"], torch.arange(3)) and gathered["b"].shape == (1,)
    finally:
        parallel_state.destroy_model_parallel()
        if not existed:
            dist.destroy_process_group()


# ------------------------------------------------------------------ Accelerate's megatron_lm_* helpers


def test_model_config_parsers_register_by_model_type():
    from drivetrain.utils import add_model_config_to_megatron_parser
    from drivetrain_megatron.helpers import MODEL_CONFIGS_TO_MEGATRON_PARSERS, megatron_parser_for

    calls = []

    @add_model_config_to_megatron_parser("tiny-gpt-for-test")
    def parse(plugin, model, batch_data):
        calls.append((plugin, model, batch_data))
        return "parsed"

    try:
        assert megatron_parser_for("tiny-gpt-for-test") is parse and parse("p", "m", "b") == "parsed"
        assert calls == [("p", "m", "b")]
        add_model_config_to_megatron_parser("tiny-gpt-for-test")(len)  # a later registration replaces it
        assert megatron_parser_for("tiny-gpt-for-test") is len
        with pytest.raises(ConfigError, match="no Megatron-LM config parser for model type 'unknown-for-test'"):
            megatron_parser_for("unknown-for-test")
        with pytest.raises(ConfigError, match="takes a model type name"):
            add_model_config_to_megatron_parser("")
    finally:
        MODEL_CONFIGS_TO_MEGATRON_PARSERS.pop("tiny-gpt-for-test", None)


def test_optimizer_and_scheduler_wrappers_leave_stepping_to_megatron():
    from drivetrain.utils import MegatronLMOptimizerWrapper, MegatronLMSchedulerWrapper

    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
    wrapped = MegatronLMOptimizerWrapper(optimizer)
    wrapped_scheduler = MegatronLMSchedulerWrapper(scheduler, wrapped)
    weight.grad = torch.full((3,), 2.0)
    wrapped.step()
    wrapped.zero_grad()
    wrapped_scheduler.step()
    # Megatron's train step does these: nothing moved, the gradient is kept, the rate unchanged
    assert torch.equal(weight.detach(), torch.ones(3)) and torch.equal(weight.grad, torch.full((3,), 2.0))
    assert optimizer.param_groups[0]["lr"] == 0.5 and wrapped.param_groups is optimizer.param_groups
    assert wrapped.step_was_skipped is False
    optimizer.skipped_iter = True  # what Megatron's optimizer sets on an overflow
    assert wrapped.step_was_skipped is True


@pytest.mark.parametrize("name, args", [
    ("megatron_lm_initialize", (None,)),
    ("megatron_lm_prepare_data_loader", (None, None)),
    ("megatron_lm_prepare_model_optimizer_scheduler", (None,)),
    ("megatron_lm_prepare_optimizer", (None, None)),
    ("megatron_lm_prepare_scheduler", (None, None, None)),
])
def test_helpers_that_drive_megatron_training_refuse_with_the_reason(clean_env, name, args):
    import drivetrain.utils

    helper = getattr(drivetrain.utils, name)
    if _found("megatron.training") and torch.cuda.is_available():
        pytest.skip("Megatron-LM and CUDA are here: the refusal is that drivetrain does not drive its loop yet")
    with pytest.raises(ConfigError, match=rf"^{name}: the megatron_lm strategy needs .*megatron\.training"):
        helper(*args)


def test_get_model_tp_size_reads_the_model_or_its_config():
    from types import SimpleNamespace

    from drivetrain.utils import get_model_tp_size

    model = torch.nn.Linear(2, 2)
    assert get_model_tp_size(model) is None
    model.tp_size = 2  # transformers before 5
    assert get_model_tp_size(model) == 2
    model.tp_size = None  # transformers 5 keeps it in the config
    model.config = SimpleNamespace(distributed_config=SimpleNamespace(tp_size=4))
    assert get_model_tp_size(model) == 4
    model.config = SimpleNamespace(distributed_config={"tp_size": 8})  # a config read back from JSON
    assert get_model_tp_size(model) == 8
