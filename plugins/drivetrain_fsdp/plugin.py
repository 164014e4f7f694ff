"""The ``fsdp`` strategy: Fully Sharded Data Parallel with torch's FSDP1
(``FullyShardedDataParallel``) or FSDP2 (``fully_shard``), on any platform torch.distributed
connects, the CPU (gloo) included.

Selected by ``distributed_type: FSDP`` in the config file, ``drivetrain launch --use-fsdp``,
``DRIVETRAIN_USE_FSDP=true`` / ``ACCELERATE_USE_FSDP=true``, or
``Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(...))``.

Importing this module is cheap (no torch). The run hooks live on the strategy's role object
(``strategy.py``), called only while FSDP is the run's strategy.
"""

from __future__ import annotations

from typing import Any

from drivetrain.plugin_api import BackendFlag, ConfigField, ConfigSection, PluginInfo, StrategySpec, bool_argument, hookimpl

from .option_names import AUTO_WRAP_POLICIES, BACKWARD_PREFETCH, ENV, SHARDING_STRATEGIES, STATE_DICT_TYPES

# API 1.6: the strategy's run hooks and state on one role object per run (strategy.py).
PLUGIN_INFO = PluginInfo(api_version="2.0", description="Fully Sharded Data Parallel (torch FSDP1 and FSDP2)")

NAME = "fsdp"
OPTIONS_ARGUMENT = "fsdp_plugin"

# config key (Accelerate's) -> (option of FullyShardedDataParallelPlugin, type, choices, default, ask, help)
CONFIG_KEYS: dict[str, tuple[str, type, Any, Any, bool, str]] = {
    "fsdp_version": ("fsdp_version", int, (1, 2), 2, True,
                     "FSDP version: 2 (fully_shard, per-parameter sharding) or 1 (FullyShardedDataParallel)"),
    "fsdp_sharding_strategy": ("sharding_strategy", str, SHARDING_STRATEGIES, "FULL_SHARD", True,
                               "what is sharded: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2"),
    "fsdp_reshard_after_forward": ("reshard_after_forward", object, None, None, False,
                                   "free gathered parameters after forward (true = FULL_SHARD, false = SHARD_GRAD_OP); "
                                   "FSDP1 configs may name a sharding strategy"),
    "fsdp_auto_wrap_policy": ("auto_wrap_policy", str, AUTO_WRAP_POLICIES, "NO_WRAP", True,
                              "which sub-modules become FSDP units: TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP"),
    "fsdp_transformer_layer_cls_to_wrap": ("transformer_cls_names_to_wrap", str, None, None, True,
                                           "comma-separated layer classes to wrap (default: the model's "
                                           "_no_split_modules)"),
    "fsdp_min_num_params": ("min_num_params", int, None, 100_000_000, False,
                            "smallest number of parameters of a unit with SIZE_BASED_WRAP"),
    "fsdp_backward_prefetch": ("backward_prefetch", str, BACKWARD_PREFETCH, "BACKWARD_PRE", False,
                               "when the next unit is gathered in backward: BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH"),
    "fsdp_backward_prefetch_policy": ("backward_prefetch", str, BACKWARD_PREFETCH, None, False,
                                      "older name of fsdp_backward_prefetch"),
    "fsdp_forward_prefetch": ("forward_prefetch", bool, None, False, False,
                              "gather the next unit during forward (static graphs only)"),
    "fsdp_offload_params": ("cpu_offload", bool, None, False, True,
                            "keep parameters and gradients in CPU memory between uses (needs an accelerator)"),
    "fsdp_state_dict_type": ("state_dict_type", str, STATE_DICT_TYPES, "SHARDED_STATE_DICT", True,
                             "checkpoints: SHARDED_STATE_DICT (one file set per process) or FULL_STATE_DICT"),
    "fsdp_use_orig_params": ("use_orig_params", bool, None, True, False,
                             "FSDP1 keeps the model's own parameters (several parameter groups, frozen weights)"),
    "fsdp_cpu_ram_efficient_loading": ("cpu_ram_efficient_loading", bool, None, False, True,
                                       "only the main process loads the weights; they are broadcast when sharding"),
    "fsdp_sync_module_states": ("sync_module_states", bool, None, False, False,
                                "start every process from the main process's weights"),
    "fsdp_activation_checkpointing": ("activation_checkpointing", bool, None, False, True,
                                      "recompute activations of each unit in backward instead of keeping them"),
    "fsdp_ignored_modules": ("ignored_modules", str, None, None, False,
                             "regular expression of module names FSDP leaves alone"),
}


#: Launch options whose default is not "unset": Accelerate's launcher starts every FSDP
#: process from the main process's weights unless told otherwise (the config file's
#: fsdp_config still replaces this default).
LAUNCH_DEFAULTS = {"fsdp_sync_module_states": True}


# --------------------------------------------------------------------------- registration


@hookimpl
def drivetrain_register_strategies():
    return [StrategySpec(
        name=NAME, distributed_type="FSDP", config_section="fsdp_config", accelerator_arguments=(OPTIONS_ARGUMENT,),
        places_models=True, hooks="drivetrain_fsdp.strategy:FSDPStrategy",
        description="shard parameters, gradients and optimizer state across processes",
    )]


@hookimpl
def drivetrain_register_config_sections():
    fields = tuple(
        ConfigField(key, type=kind, default=default, choices=choices, help=text, env=ENV[option], ask=ask)
        for key, (option, kind, choices, default, ask, text) in CONFIG_KEYS.items()
    )
    return [ConfigSection("fsdp_config", fields=fields, enabled_when="FSDP",
                          description="Fully Sharded Data Parallel options")]


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("FSDP", "options of the fsdp strategy (also read from fsdp_config: in the "
                                               "config file)")
    group.add_argument("--use-fsdp", action=BackendFlag.choosing("strategy", NAME),
                       help="use Fully Sharded Data Parallel (same as --strategy fsdp)")
    for key, (_option, kind, choices, _default, _ask, text) in CONFIG_KEYS.items():
        if key == "fsdp_backward_prefetch_policy":
            continue
        argument_type = {bool: bool_argument, int: int}.get(kind, str)
        group.add_argument("--" + key.replace("_", "-"), dest=key, type=argument_type, default=LAUNCH_DEFAULTS.get(key),
                           metavar="BOOL" if kind is bool else None, help=text)


@hookimpl
def drivetrain_launch_environment(args):
    """FSDP_* variables for the options given on the command line (the config file's values
    reach the children through the core, from each field's ``env``), checked before launch."""
    if getattr(args, "strategy", None) != NAME:
        return None
    values: dict[str, Any] = {}
    for key, (option, *_rest) in CONFIG_KEYS.items():
        value = getattr(args, key, None)
        if value is None:
            config = getattr(args, "config", None)
            block = config.sections.get("fsdp_config") if config is not None else None
            value = block.get(key) if isinstance(block, dict) else None
        if value is not None and values.get(option) is None:
            values[option] = value
    import os

    from .options import FullyShardedDataParallelPlugin, environment_of

    env = environment_of(values)
    FullyShardedDataParallelPlugin.from_environment({**os.environ, **env})  # refuse before any process starts
    return env


@hookimpl
def drivetrain_add_cli_commands(subparsers):
    from .to_fsdp2 import to_fsdp2_command_parser
    from .merge import add_merge_command

    add_merge_command(subparsers)
    to_fsdp2_command_parser(subparsers)


@hookimpl
def drivetrain_public_names():
    return {"FullyShardedDataParallelPlugin": "drivetrain_fsdp.options:FullyShardedDataParallelPlugin",
            "merge_fsdp_weights": "drivetrain_fsdp.merge:merge_fsdp_weights",
            # Accelerate's `accelerate.commands.merge` and `accelerate.commands.to_fsdp2`
            **{f"commands.{module}.{name}": f"drivetrain_fsdp.{source}:{name}" for module, source, names in (
                ("merge", "commands", ("merge_command", "merge_command_parser")),
                ("to_fsdp2", "to_fsdp2", ("to_fsdp2_command", "to_fsdp2_command_parser", "convert_config_to_fsdp2",
                                          "load_config"))) for name in names},
            **{f"utils.{name}": f"drivetrain_fsdp.compat:{name}" for name in (
                "enable_fsdp_ram_efficient_loading", "disable_fsdp_ram_efficient_loading",
                "fsdp2_canonicalize_names", "compile_regions_fsdp2", "get_fsdp2_grad_scaler")},
            **{f"utils.{name}": f"drivetrain_fsdp.helpers:{name}" for name in (
                "save_fsdp_model", "load_fsdp_model", "save_fsdp_optimizer", "load_fsdp_optimizer",
                "fsdp2_prepare_model", "fsdp2_load_full_state_dict", "fsdp2_switch_optimizer_parameters",
                "fsdp2_apply_ac")},
            # Accelerate's `accelerate.utils.fsdp_utils` module (TRL imports from it)
            **{f"utils.fsdp_utils.{name}": f"drivetrain_fsdp.{module}:{name}" for module, names in (
                ("compat", ("enable_fsdp_ram_efficient_loading", "disable_fsdp_ram_efficient_loading",
                            "fsdp2_canonicalize_names", "get_parameters_from_modules")),
                ("helpers", ("save_fsdp_model", "load_fsdp_model", "save_fsdp_optimizer", "load_fsdp_optimizer",
                             "fsdp2_prepare_model", "fsdp2_load_full_state_dict",
                             "fsdp2_switch_optimizer_parameters", "fsdp2_apply_ac")),
                ("merge", ("merge_fsdp_weights",))) for name in names},
            "test_utils.testing.require_fsdp2": "drivetrain_fsdp.compat:require_fsdp2",
            **{f"utils.constants.{name}": f"drivetrain_fsdp.compat:{name}" for name in (
                "FSDP_SHARDING_STRATEGY", "FSDP_AUTO_WRAP_POLICY", "FSDP_BACKWARD_PREFETCH", "FSDP_STATE_DICT_TYPE",
                "FSDP2_STATE_DICT_TYPE", "FSDP_MODEL_NAME")}}
