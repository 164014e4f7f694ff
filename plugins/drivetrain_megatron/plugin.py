"""The ``megatron_lm`` strategy: Megatron-LM's tensor, pipeline and sequence parallelism.

Selected by ``distributed_type: MEGATRON_LM`` in the config file (options in its
``megatron_lm_config:`` block), ``drivetrain launch --use-megatron-lm`` (options as
``--megatron-lm-*``), ``ACCELERATE_USE_MEGATRON_LM=true``, or
``Accelerator(megatron_lm_plugin=MegatronLMPlugin(...))``.

It needs megatron-core (``pip install 'drivetrain[megatron]'``), Megatron-LM's training package
and CUDA devices; where one is missing it refuses before any process starts, naming it (see
``engine.py``). Importing this module is cheap (no torch, no Megatron); the run hooks live on
the strategy's role object (``strategy.py``).
"""

from __future__ import annotations


from drivetrain.plugin_api import BackendFlag, ConfigField, ConfigSection, PluginInfo, StrategySpec, bool_argument, hookimpl

from .option_names import ENV

# API 1.6: the run hooks on one role object per run (strategy.py).
PLUGIN_INFO = PluginInfo(api_version="2.0", description="Megatron-LM tensor/pipeline/sequence parallelism",
                         requires=("megatron-core>=0.8",), extra="megatron")

NAME = "megatron_lm"
SECTION = "megatron_lm_config"

# config key = launch option (Accelerate's) -> (MegatronLMPlugin option, type, help)
CONFIG_KEYS: dict[str, tuple[str, type, str]] = {
    "megatron_lm_tp_degree": ("tp_degree", int, "tensor-parallel degree"),
    "megatron_lm_pp_degree": ("pp_degree", int, "pipeline-parallel degree"),
    "megatron_lm_num_micro_batches": ("num_micro_batches", int, "micro-batches per step when pp_degree > 1"),
    "megatron_lm_sequence_parallelism": ("sequence_parallelism", bool, "split activations over the TP processes"),
    "megatron_lm_recompute_activations": ("recompute_activations", bool, "selective activation recomputation"),
    "megatron_lm_use_distributed_optimizer": ("use_distributed_optimizer", bool,
                                              "shard optimizer state and gradients over data-parallel processes"),
    "megatron_lm_gradient_clipping": ("gradient_clipping", float, "clip the global gradient L2 norm (0: off)"),
}


@hookimpl
def drivetrain_register_strategies():
    return [StrategySpec(name=NAME, distributed_type="MEGATRON_LM", config_section=SECTION,
                         accelerator_arguments=("megatron_lm_plugin",), needs_multiple_processes=False,
                         hooks="drivetrain_megatron.strategy:MegatronStrategy",
                         description="Megatron-LM tensor, pipeline and sequence parallelism (CUDA)")]


@hookimpl
def drivetrain_register_config_sections():
    fields = tuple(ConfigField(key, type=kind, help=text, env=ENV[option], ask=True)
                   for key, (option, kind, text) in CONFIG_KEYS.items())
    return [ConfigSection(SECTION, fields=fields, enabled_when="MEGATRON_LM", description="Megatron-LM options")]


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("Megatron-LM", "options of the megatron_lm strategy (also read from "
                                                     "megatron_lm_config: in the config file)")
    group.add_argument("--use-megatron-lm", action=BackendFlag.choosing("strategy", NAME),
                       help="use Megatron-LM (same as --strategy megatron_lm)")
    for key, (_option, kind, text) in CONFIG_KEYS.items():
        group.add_argument("--" + key.replace("_", "-"), dest=key, type=bool_argument if kind is bool else kind,
                           default=None, metavar="BOOL" if kind is bool else None, help=text)


@hookimpl
def drivetrain_launch_environment(args):
    """MEGATRON_LM_* variables, checked (options, degrees, requirements) before launch."""
    if getattr(args, "strategy", None) != NAME:
        return None
    import os

    from .engine import refusal
    from .options import MegatronLMPlugin

    config = getattr(args, "config", None)
    block = config.sections.get(SECTION) if config is not None else None
    env = dict(os.environ)
    for key, (option, *_rest) in CONFIG_KEYS.items():
        value = getattr(args, key, None)
        if value is None and isinstance(block, dict):
            value = block.get(key)
        if value is not None:
            env[ENV[option]] = str(value).lower() if isinstance(value, bool) else str(value)
            env.pop("DRIVETRAIN_" + ENV[option], None)
    options = MegatronLMPlugin.from_environment(env)
    if getattr(args, "num_processes", None):
        options.data_parallel_degree(int(args.num_processes))
    error = refusal("cpu" if args.cpu or getattr(args, "platform", None) == "cpu" else getattr(args, "platform", ""))
    if error is not None:
        raise error
    return options.environment()


@hookimpl
def drivetrain_public_names():
    names = {name: f"drivetrain_megatron.engine:{name}"
             for name in ("MegatronEngine", "AbstractTrainStep", "GPTTrainStep", "BertTrainStep", "T5TrainStep",
                          "MegatronLMDummyDataLoader", "MegatronLMDummyScheduler",
                          "avg_losses_across_data_parallel_group", "gather_across_data_parallel_groups",
                          "is_megatron_lm_available")}
    names["MegatronLMPlugin"] = "drivetrain_megatron.options:MegatronLMPlugin"
    # Accelerate defines these in `accelerate.utils.megatron_lm` and re-exports them from `utils`
    names.update({f"utils.megatron_lm.{name}": ref for name, ref in names.items()
                  if name not in ("MegatronLMPlugin", "is_megatron_lm_available")})
    names["utils.is_megatron_lm_available"] = names["is_megatron_lm_available"]  # above the absent-backend fallback
    names.update({f"utils.{name}": f"drivetrain_megatron.helpers:{name}"
                  for name in ("MegatronLMOptimizerWrapper", "MegatronLMSchedulerWrapper",
                               "add_model_config_to_megatron_parser", "megatron_lm_initialize",
                               "megatron_lm_prepare_data_loader", "megatron_lm_prepare_model_optimizer_scheduler",
                               "megatron_lm_prepare_optimizer", "megatron_lm_prepare_scheduler")})
    names.update({f"utils.megatron_lm.{name}": f"drivetrain_megatron.helpers:{name}"
                  for name in ("MegatronLMOptimizerWrapper", "MegatronLMSchedulerWrapper")})
    return names
