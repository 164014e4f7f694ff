"""The ``parallelism_config`` strategy: ND parallelism on a torch ``DeviceMesh`` of
``dp_replicate × dp_shard × cp × tp`` processes: tensor parallelism (``parallelize_module``
with the model's plan), FSDP2 over the sharded data-parallel dimensions, HSDP across
replicas, context parallelism (ring attention, where torch has the kernels).

Selected by ``Accelerator(parallelism_config=ParallelismConfig(...))`` (or
``torch_tp_plugin=TorchTensorParallelPlugin(...)``), ``drivetrain launch
--use-parallelism-config`` (sizes as ``--parallelism-config-*``),
``ACCELERATE_USE_PARALLELISM_CONFIG=true``, or ``strategy: parallelism_config`` with a
``parallelism_config:`` block in the config file.

Sharding and checkpoints are the fsdp plugin's code (FSDP2, DCP), given this strategy's mesh:
its role object (``strategy.py``) is an FSDP strategy object with a layout. Importing this
module is cheap (no torch).
"""

from __future__ import annotations

from typing import Any

from drivetrain.plugin_api import ConfigField, ConfigSection, PluginInfo, StrategySpec, bool_argument, hookimpl

from .option_names import CP_COMM_STRATEGIES, ENV, SP_BACKENDS, SP_HANDLER_FIELDS

PLUGIN_INFO = PluginInfo(api_version="2.0", description="ND parallelism: data × sharded data × tensor × context "
                                                        "(ParallelismConfig)")

NAME = "parallelism_config"
SECTION = "parallelism_config"

# config key (Accelerate's, also the launch option) -> (ParallelismConfig field, type, choices, default, help)
CONFIG_KEYS: dict[str, tuple[str, type, Any, Any, str]] = {
    "parallelism_config_dp_replicate_size": ("dp_replicate_size", int, None, 1,
                                             "replicas of the (sharded) model that average gradients (HSDP)"),
    "parallelism_config_dp_shard_size": ("dp_shard_size", int, None, 1,
                                         "processes that shard parameters, gradients and optimizer state (FSDP2)"),
    "parallelism_config_tp_size": ("tp_size", int, None, 1, "processes that split each layer (tensor parallelism)"),
    "parallelism_config_cp_size": ("cp_size", int, None, 1,
                                   "processes that split each sequence (context parallelism; GPUs only)"),
    "parallelism_config_cp_comm_strategy": ("cp_comm_strategy", str, CP_COMM_STRATEGIES, "allgather",
                                            "how context parallelism exchanges keys and values: allgather or alltoall"),
    "parallelism_config_sp_size": ("sp_size", int, None, 1,
                                   "processes that split each sequence with DeepSpeed's Ulysses (deepspeed strategy)"),
    "parallelism_config_sp_backend": ("sp_backend", str, SP_BACKENDS, "deepspeed", "who runs sequence parallelism"),
    "parallelism_config_sp_seq_length": ("sp_seq_length", int, None, None,
                                         "the fixed sequence length, when sp_seq_length_is_variable is false"),
    "parallelism_config_sp_seq_length_is_variable": ("sp_seq_length_is_variable", bool, None, None,
                                                     "whether the sequence length may change between batches"),
    "parallelism_config_sp_attn_implementation": ("sp_attn_implementation", str, None, None,
                                                  "the attention Ulysses wraps: sdpa, flash_attention_2, ..."),
}


@hookimpl
def drivetrain_register_strategies():
    return [StrategySpec(
        name=NAME, config_section=SECTION, accelerator_arguments=("parallelism_config", "torch_tp_plugin"),
        composes_arguments=("fsdp_plugin",),
        places_models=True, hooks="drivetrain_fsdp.parallelism.strategy:ParallelismStrategy",
        description="ND parallelism on a device mesh: dp_replicate × dp_shard (FSDP2) × cp × tp",
    )]


@hookimpl
def drivetrain_register_config_sections():
    fields = tuple(ConfigField(key, type=kind, default=default, choices=choices, help=text, env=ENV[option],
                               ask=True)
                   for key, (option, kind, choices, default, text) in CONFIG_KEYS.items())
    return [ConfigSection(SECTION, fields=fields, enabled_when=NAME.upper(),
                          description="ND parallelism: sizes of the device mesh")]


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("ParallelismConfig", "ND parallelism (also read from parallelism_config: in the "
                                                           "config file)")
    group.add_argument("--use-parallelism-config", dest="strategy", action="store_const", const=NAME,
                       help="lay processes out as dp_replicate × dp_shard × cp × tp (same as --strategy "
                            "parallelism_config)")
    for key, (_option, kind, choices, _default, text) in CONFIG_KEYS.items():
        group.add_argument("--" + key.replace("_", "-"), dest=key, type=bool_argument if kind is bool else kind, default=None, choices=choices,
                           help=text)


@hookimpl
def drivetrain_launch_environment(args):
    """The layout's variables, checked against the job's process count before it starts."""
    config = getattr(args, "config", None)
    block = config.sections.get(SECTION) if config is not None else None
    selection = getattr(args, "selection", None)
    strategy = getattr(selection, "strategy", None)
    # a strategy that composes the layout (DeepSpeed running Ulysses sequence parallelism) reads it too
    composing = strategy is not None and "parallelism_config" in strategy.composes_arguments
    if getattr(args, "strategy", None) != NAME and not composing:
        if isinstance(block, dict) and block:
            from drivetrain.plugin_api import ConfigError

            raise ConfigError(f"the config file has a {SECTION}: block but the run's strategy is "
                              f"{getattr(args, 'strategy', None)!r}; add `strategy: {NAME}` (FSDP options still apply "
                              "from fsdp_config:) or remove the block")
        return None
    import os

    from .config import ParallelismConfig

    env = dict(os.environ)
    for key, (option, *_rest) in CONFIG_KEYS.items():
        value = getattr(args, key, None)
        if value is None and isinstance(block, dict):
            value = block.get(key)
        if value is not None:
            env[ENV[option]] = str(value)
            env.pop("DRIVETRAIN_" + ENV[option], None)
    if composing and not any(ENV[option] in env or "DRIVETRAIN_" + ENV[option] in env
                             for _key, (option, *_rest) in CONFIG_KEYS.items()):
        return None  # no layout asked for
    layout = ParallelismConfig.from_environment(env)
    processes = getattr(args, "num_processes", None)
    if processes:
        layout.validate(int(processes))  # refuse before any process starts
    handler = {ENV[name]: str(env[ENV[name]]).lower() for name in SP_HANDLER_FIELDS if ENV[name] in env}
    return {**layout.environment(), **handler, **{"DRIVETRAIN_" + key: value for key, value in handler.items()}}


@hookimpl
def drivetrain_public_names():
    names = {name: f"drivetrain_fsdp.parallelism.config:{name}"
             for name in ("ParallelismConfig", "TorchTensorParallelConfig", "TorchContextParallelConfig",
                          "TorchTensorParallelPlugin")}
    names["parallelism_config.ParallelismConfig"] = "drivetrain_fsdp.parallelism.config:ParallelismConfig"
    names.update({f"utils.constants.{name}": f"drivetrain_fsdp.parallelism.config:{name}" for name in (
        "BETA_TP_AVAILABLE_PYTORCH_VERSION", "BETA_TP_AVAILABLE_TRANSFORMERS_VERSION",
        "BETA_CP_AVAILABLE_PYTORCH_VERSION")})
    names["utils.get_model_tp_size"] = "drivetrain_fsdp.parallelism.model_info:get_model_tp_size"
    return names
