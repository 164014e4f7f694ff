"""fp8 through torchao: linear layers become ``Float8Linear`` before the parallel wrapper.

Selected by ``mixed_precision="fp8"`` when torchao is the best usable fp8 backend here, or
explicitly by ``AORecipeKwargs``, ``--fp8-backend ao`` or ``precision_backend: ao``. This
plugin also owns the launch options and the ``fp8_config:`` block shared by every fp8 backend.
"""

from __future__ import annotations

from drivetrain.plugin_api import ConfigField, ConfigSection, PluginInfo, PrecisionSpec, hookimpl

PLUGIN_INFO = PluginInfo(api_version="2.0", description="fp8 training with torchao's Float8Linear",
                         requires=("torchao>=0.6",), extra="torchao")

BACKENDS = ("ao", "te", "msamp")


def _probe():
    from .capability import probe

    return probe()


@hookimpl
def drivetrain_register_precisions():
    return [PrecisionSpec(name="fp8", backend="ao", probe=_probe, priority=10,
                          hooks="drivetrain_torchao.precision:AOFloat8",
                          description="float8 linear layers (torchao); emulated on the CPU")]


@hookimpl
def drivetrain_configure_run(run, accelerator):
    if run.selection.precision is None or run.selection.precision.backend != "ao":
        return None
    from .members import FP8Members
    from .recipe import AORecipeKwargs

    given = run.handler_kwargs.get("AORecipeKwargs")
    return FP8Members("AO", given or AORecipeKwargs(), given is not None)


@hookimpl
def drivetrain_public_names():
    names = {
        "AORecipeKwargs": "drivetrain_torchao.recipe:AORecipeKwargs",
        "utils.AORecipeKwargs": "drivetrain_torchao.recipe:AORecipeKwargs",
        "utils.convert_model_to_fp8_ao": "drivetrain_torchao.convert:convert_model_to_fp8_ao",
        "utils.filter_first_and_last_linear_layers": "drivetrain_torchao.convert:filter_first_and_last_linear_layers",
        "utils.has_ao_layers": "drivetrain_torchao.convert:has_ao_layers",
        "utils.is_torchao_available": "drivetrain_torchao.capability:is_torchao_available",
        "utils.torchao_required": "drivetrain_torchao.capability:torchao_required",
        "utils.is_fp8_available": "drivetrain_torchao.fp8:is_fp8_available",
    }
    # Accelerate defines its fp8 conversion helpers in `accelerate.utils.ao`
    names.update({f"utils.ao.{name}": names[f"utils.{name}"]
                  for name in ("convert_model_to_fp8_ao", "filter_first_and_last_linear_layers", "has_ao_layers")})
    return names


def _flag(value: str) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("FP8", "fp8 training: backend and options (plugins torchao, "
                                             "transformer_engine, msamp)")
    group.add_argument("--fp8-backend", dest="precision_backend", type=str.lower, choices=BACKENDS,
                       help="fp8 implementation: ao (torchao), te (Transformer Engine) or msamp (MS-AMP)")
    group.add_argument("--fp8-enable-fsdp-float8-all-gather", type=_flag, default=None, metavar="BOOL",
                       help="torchao: FSDP2 gathers weights in float8 (default true)")
    group.add_argument("--fp8-pad-inner-dim", type=_flag, default=None, metavar="BOOL",
                       help="torchao: pad inner dimensions to multiples of 16 (default true)")


@hookimpl
def drivetrain_launch_environment(args):
    from drivetrain.plugin_api.environment import as_env_value

    env = {}
    for option, variable in (("fp8_enable_fsdp_float8_all_gather", "ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"),
                             ("fp8_pad_inner_dim", "ACCELERATE_FP8_PAD_INNER_DIM")):
        value = getattr(args, option, None)
        if value is not None:
            env[variable] = as_env_value(value)
    return env


@hookimpl
def drivetrain_register_config_sections():
    return [ConfigSection(
        key="fp8_config",
        fields=(
            # Accelerate's key, kept for its files; drivetrain chooses by the top-level precision_backend
            ConfigField("backend", str, None, choices=("AO", "TE", "MSAMP"),
                        help="fp8 implementation as Accelerate names it (drivetrain selects by precision_backend)",
                        env="ACCELERATE_FP8_BACKEND"),
            ConfigField("fp8_format", str, "HYBRID", choices=("HYBRID", "E4M3", "E5M2"), env="ACCELERATE_FP8_FORMAT"),
            ConfigField("margin", int, 0, env="ACCELERATE_FP8_MARGIN"),
            ConfigField("interval", int, 1, env="ACCELERATE_FP8_INTERVAL"),
            ConfigField("amax_history_length", int, 1024, env="ACCELERATE_FP8_AMAX_HISTORY_LEN"),
            ConfigField("amax_compute_algorithm", str, "most_recent", choices=("max", "most_recent"),
                        env="ACCELERATE_FP8_AMAX_COMPUTE_ALGO"),
            ConfigField("override_linear_precision", object, None, env="ACCELERATE_FP8_OVERRIDE_LINEAR_PRECISION"),
            ConfigField("use_autocast_during_eval", bool, False, env="ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL"),
            ConfigField("opt_level", str, "O2", choices=("O1", "O2"), env="ACCELERATE_FP8_OPT_LEVEL"),
            ConfigField("enable_fsdp_float8_all_gather", bool, True,
                        env="ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"),
            ConfigField("pad_inner_dim", bool, True, env="ACCELERATE_FP8_PAD_INNER_DIM"),
        ),
        enabled_when="fp8",
        description="fp8 training (torchao, Transformer Engine, MS-AMP)",
    )]
