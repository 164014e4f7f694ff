"""The ``deepspeed`` strategy: DeepSpeed's ZeRO engine (stages 0-3, CPU/NVMe offload).

Selected by ``distributed_type: DEEPSPEED`` in the config file, ``drivetrain launch
--use-deepspeed`` (or ``--strategy deepspeed``), ``DRIVETRAIN_USE_DEEPSPEED=true`` /
``ACCELERATE_USE_DEEPSPEED=true``, or ``Accelerator(deepspeed_plugin=DeepSpeedPlugin(...))``
(``deepspeed_plugins={name: ...}`` for several models).

Importing this module is cheap (no torch, no deepspeed): the hooks import what they need
when the strategy is in use.
"""

from __future__ import annotations

import os
from typing import Any

from drivetrain.plugin_api import (
    BackendFlag,
    ClusterEnvironmentSpec,
    ConfigField,
    ConfigSection,
    EnvReportLine,
    LauncherSpec,
    PluginInfo,
    StrategySpec,
    bool_argument,
    hookimpl,
)

from .environment import probe_deepspeed_launcher
from .launcher import MULTINODE_LAUNCHERS, applies
from .option_names import DS_ACCELERATORS, OFFLOAD_DEVICES, OPTIONS

# API 2.0: the strategy is a plugin_api.Strategy whose step methods are called directly and which
# owns the run's precision (EnginePrecision); 1.6: the strategy is one role object per run, asked for MS-AMP (drivetrain_adopt_precision); 1.3: the
# strategy's run hooks on its role object (1.2: drivetrain_compile_model and
# drivetrain_clip_grad_value; 1.1: drivetrain_configure_run, the accelerator/models given to
# prepare_objects/backward).
PLUGIN_INFO = PluginInfo(api_version="2.0", description="DeepSpeed ZeRO stages 0-3 with CPU/NVMe offload",
                         requires=("deepspeed>=0.14",), extra="deepspeed")

NAME = "deepspeed"
SECTION = "deepspeed_config"

# config key (Accelerate's) -> (DeepSpeedPlugin option or None, type, choices, ask, help)
CONFIG_KEYS: dict[str, tuple[str | None, type, Any, bool, str]] = {
    "deepspeed_config_file": ("hf_ds_config", str, None, True,
                              "DeepSpeed JSON config file, its \"auto\" values filled by prepare() (default: none)"),
    "zero_stage": ("zero_stage", int, (0, 1, 2, 3), True,
                   "ZeRO stage: 0 off, 1 optimizer states, 2 and gradients, 3 and parameters (default: 2, or the file's)"),
    "gradient_accumulation_steps": ("gradient_accumulation_steps", int, None, False,
                                    "micro-batches per optimizer step"),
    "gradient_clipping": ("gradient_clipping", float, None, True, "clip the global gradient norm to this value (default: no clipping, or the file's)"),
    "offload_optimizer_device": ("offload_optimizer_device", str, OFFLOAD_DEVICES, True,
                                 "where optimizer states live: none, cpu or nvme (default: none, or the file's)"),
    "offload_param_device": ("offload_param_device", str, OFFLOAD_DEVICES, True,
                             "where parameters live (ZeRO-3): none, cpu or nvme (default: none, or the file's)"),
    "offload_optimizer_nvme_path": ("offload_optimizer_nvme_path", str, None, False,
                                    "directory for nvme optimizer offload"),
    "offload_param_nvme_path": ("offload_param_nvme_path", str, None, False, "directory for nvme parameter offload"),
    "zero3_init_flag": ("zero3_init_flag", bool, None, True,
                        "build models partitioned (deepspeed.zero.Init) under ZeRO-3 (default: yes with ZeRO-3)"),
    "zero3_save_16bit_model": ("zero3_save_16bit_model", bool, None, True,
                               "under ZeRO-3, save_model writes the 16-bit training weights (default: no, fp32)"),
    "deepspeed_moe_layer_cls_names": ("transformer_moe_cls_names", str, None, False,
                                      "comma-separated mixture-of-experts layer classes ZeRO-3 keeps whole"),
    "deepspeed_hostfile": (None, str, None, False, "hostfile of DeepSpeed's multi-node launcher"),
    "deepspeed_inclusion_filter": (None, str, None, False, "hosts/slots DeepSpeed's launcher uses (-i)"),
    "deepspeed_exclusion_filter": (None, str, None, False, "hosts/slots DeepSpeed's launcher leaves out (-e)"),
    "deepspeed_multinode_launcher": (None, str, MULTINODE_LAUNCHERS, False,
                                     "how DeepSpeed starts several machines: pdsh (default), standard (torchrun), "
                                     "openmpi, mvapich, mpich, impi, slurm, nossh"),
}


# --------------------------------------------------------------------------- registration


@hookimpl
def drivetrain_register_strategies():
    return [StrategySpec(
        name=NAME, distributed_type="DEEPSPEED", platforms=tuple(sorted(DS_ACCELERATORS)), config_section=SECTION,
        accelerator_arguments=("deepspeed_plugin", "deepspeed_plugins"),
        composes_arguments=("parallelism_config",),  # Ulysses sequence parallelism (sp_size)
        hooks="drivetrain_deepspeed.strategy:DeepSpeedStrategy",
        description="DeepSpeed ZeRO: shard optimizer states, gradients and parameters; CPU/NVMe offload",
    )]


@hookimpl
def drivetrain_register_config_sections():
    # No ConfigField defaults: an unanswered question leaves the key out, so a DeepSpeed config file (or
    # DeepSpeedPlugin's own defaults) decides instead of a value the user never chose.
    fields = []
    for key, (option, kind, choices, ask, text) in CONFIG_KEYS.items():
        env = OPTIONS[option][0] if option is not None else None
        fields.append(ConfigField(key, type=kind, choices=choices, help=text, env=env, ask=ask))
    return [ConfigSection(SECTION, fields=tuple(fields), enabled_when="DEEPSPEED",
                          description="DeepSpeed options (Accelerate's deepspeed_config: block)")]


@hookimpl
def drivetrain_register_launchers():
    return [LauncherSpec(NAME, "drivetrain_deepspeed.launcher:launch_deepspeed", applies=applies, priority=20,
                         description="DeepSpeed's launcher (pdsh, OpenMPI, MVAPICH, SLURM, ...) for multi-node "
                                     "DeepSpeed jobs with a hostfile")]


@hookimpl
def drivetrain_register_cluster_environments():
    return [ClusterEnvironmentSpec("deepspeed-launcher", "drivetrain_deepspeed.environment:from_deepspeed_launcher",
                                   probe_deepspeed_launcher, priority=30,
                                   description="processes started by DeepSpeed's launcher")]


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("DeepSpeed", "options of the deepspeed strategy (also read from "
                                                   "deepspeed_config: in the config file)")
    group.add_argument("--use-deepspeed", action=BackendFlag.choosing("strategy", NAME),
                       help="use DeepSpeed (same as --strategy deepspeed)")
    for key, (option, kind, choices, _ask, text) in CONFIG_KEYS.items():
        if key == "gradient_accumulation_steps":
            continue  # a core option (--gradient-accumulation-steps)
        argument_type = {bool: bool_argument, int: int, float: float}.get(kind, str)
        group.add_argument("--" + key.replace("_", "-"), dest=key, type=argument_type, default=None,
                           metavar="BOOL" if kind is bool else None, help=text)


@hookimpl
def drivetrain_launch_environment(args):
    """DeepSpeed's variables for the children, from the command line and the config's block;
    the options are checked (config file included) before any process starts."""
    if getattr(args, "strategy", None) != NAME:
        return None
    from .options import DeepSpeedPlugin, launch_options_environment

    config = getattr(args, "config", None)
    block = config.sections.get(SECTION) if config is not None else None
    block = block if isinstance(block, dict) else {}
    values: dict[str, Any] = {}
    for key, (option, *_rest) in CONFIG_KEYS.items():
        if option is None:
            continue
        value = getattr(args, key, None)
        if value is None:
            value = block.get(key)
        if value is not None:
            values[option] = value
    if values.get("hf_ds_config"):
        values["hf_ds_config"] = os.path.abspath(os.path.expanduser(str(values["hf_ds_config"])))
    env = launch_options_environment(values)
    DeepSpeedPlugin.from_environment({**os.environ, **env})  # refuse a bad option or config file now
    env["DRIVETRAIN_USE_DEEPSPEED"] = "true"
    return env


@hookimpl
def drivetrain_public_names():
    return {
        "DeepSpeedPlugin": "drivetrain_deepspeed.options:DeepSpeedPlugin",
        "DummyOptim": "drivetrain_deepspeed.options:DummyOptim",
        "DummyScheduler": "drivetrain_deepspeed.options:DummyScheduler",
        "get_active_deepspeed_plugin": "drivetrain_deepspeed.options:get_active_deepspeed_plugin",
        "DeepSpeedOptimizerWrapper": "drivetrain_deepspeed.engine:DeepSpeedOptimizerWrapper",
        "DeepSpeedSchedulerWrapper": "drivetrain_deepspeed.engine:DeepSpeedSchedulerWrapper",
        # Accelerate's `accelerate.utils` helpers for DeepSpeed
        **{f"utils.{name}": f"drivetrain_deepspeed.compat:{name}" for name in (
            "is_deepspeed_available", "deepspeed_required", "GatheredParameters", "HfDeepSpeedConfig",
            "DeepSpeedEngineWrapper")},
        **{f"utils.{name}": f"drivetrain_deepspeed.helpers:{name}" for name in (
            "compile_regions_deepspeed", "map_pytorch_optim_to_deepspeed", "prepare_deepspeed_cmd_env")},
        "utils.DeepSpeedSequenceParallelConfig": "drivetrain_deepspeed.sequence_parallel:DeepSpeedSequenceParallelConfig",
        # Accelerate's `accelerate.utils.deepspeed` module, where transformers imports them from
        **{f"utils.deepspeed.{name}": f"drivetrain_deepspeed.compat:{name}" for name in (
            "HfDeepSpeedConfig", "DeepSpeedEngineWrapper")},
        **{f"utils.deepspeed.{name}": f"drivetrain_deepspeed.options:{name}" for name in (
            "DummyOptim", "DummyScheduler", "get_active_deepspeed_plugin")},
        **{f"utils.deepspeed.{name}": f"drivetrain_deepspeed.engine:{name}" for name in (
            "DeepSpeedOptimizerWrapper", "DeepSpeedSchedulerWrapper")},
        "utils.deepspeed.map_pytorch_optim_to_deepspeed": "drivetrain_deepspeed.helpers:map_pytorch_optim_to_deepspeed",
        "utils.constants.BETA_SP_AVAILABLE_DEEPSPEED_VERSION":
            "drivetrain_deepspeed.sequence_parallel:BETA_SP_AVAILABLE_DEEPSPEED_VERSION",
    }


@hookimpl
def drivetrain_env_report():
    import importlib.metadata

    try:
        version = importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed (pip install 'drivetrain[deepspeed]')"
    lines = [EnvReportLine("deepspeed", version)]
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        lines.append(EnvReportLine("TORCH_EXTENSIONS_DIR (DeepSpeed ops)", os.environ["TORCH_EXTENSIONS_DIR"]))
    return lines


# ----------------------------------------------------------------------------- the run
# The strategy's run hooks are DeepSpeedStrategy's (strategy.py). Unwrapping is not: an engine
# is unwrapped whatever strategy the run uses now.


@hookimpl
def drivetrain_unwrap_model(model, run, keep_fp32_wrapper):
    from .engine import is_engine

    return model.module if is_engine(model) else None
