"""fp8 through NVIDIA Transformer Engine: TE layers swapped in, forward under ``fp8_autocast``.

Selected by ``mixed_precision="fp8"`` when TE is the best usable fp8 backend here (it is the
first choice where installed), or by ``TERecipeKwargs``/``FP8RecipeKwargs``, ``--fp8-backend
te`` or ``precision_backend: te``. Needs a CUDA GPU of compute capability 8.9 or newer.
"""

from __future__ import annotations

from drivetrain.plugin_api import PluginInfo, PrecisionSpec, Probe, hookimpl

# API 1.3: the precision's run hooks on its role object.
PLUGIN_INFO = PluginInfo(api_version="2.0", description="fp8 with NVIDIA Transformer Engine",
                         requires=("transformer-engine>=1.8",), extra="te")


def probe() -> Probe:
    import torch

    from drivetrain.plugin_api import contributed

    if not torch.cuda.is_available():
        return Probe(False, "Transformer Engine needs a CUDA GPU of compute capability 8.9 or newer "
                            "(use --fp8-backend ao to emulate fp8 on the CPU)")
    # The cuda plugin answers whether the GPU has fp8 units; without it, no GPU qualifies.
    if not contributed("utils.check_cuda_fp8_capability", lambda: False)():
        major, minor = torch.cuda.get_device_capability()
        return Probe(False, f"fp8 needs a GPU of compute capability 8.9 or newer (Ada, Hopper, Blackwell); "
                            f"this one has {major}.{minor}: use bf16")
    return Probe(True, "Transformer Engine on an fp8-capable GPU")


@hookimpl
def drivetrain_register_precisions():
    return [PrecisionSpec(name="fp8", backend="te", platforms=("cuda",), probe=probe, priority=30,
                          hooks="drivetrain_transformer_engine.precision:TransformerEnginePrecision",
                          description="Transformer Engine layers under fp8_autocast")]


@hookimpl
def drivetrain_public_names():
    names = {
        "TERecipeKwargs": "drivetrain_transformer_engine.recipe:TERecipeKwargs",
        "FP8RecipeKwargs": "drivetrain_transformer_engine.recipe:FP8RecipeKwargs",
        "utils.TERecipeKwargs": "drivetrain_transformer_engine.recipe:TERecipeKwargs",
        "utils.FP8RecipeKwargs": "drivetrain_transformer_engine.recipe:FP8RecipeKwargs",
        "utils.convert_model": "drivetrain_transformer_engine.layers:convert_model",
        "utils.has_transformer_engine_layers": "drivetrain_transformer_engine.layers:has_transformer_engine_layers",
        "utils.apply_fp8_autowrap": "drivetrain_transformer_engine.layers:apply_fp8_autowrap",
        "utils.contextual_fp8_autocast": "drivetrain_transformer_engine.layers:contextual_fp8_autocast",
        "utils.is_transformer_engine_available": "drivetrain_transformer_engine.layers:is_transformer_engine_available",
        "utils.is_transformer_engine_mxfp8_available":
            "drivetrain_transformer_engine.layers:is_transformer_engine_mxfp8_available",
    }
    # Accelerate defines its layer helpers in `accelerate.utils.transformer_engine`
    names.update({f"utils.transformer_engine.{name}": names[f"utils.{name}"]
                  for name in ("convert_model", "has_transformer_engine_layers", "apply_fp8_autowrap",
                               "contextual_fp8_autocast")})
    return names


#: launch option -> the variable TERecipeKwargs reads
VARIABLES = {
    "fp8_format": "ACCELERATE_FP8_FORMAT", "fp8_margin": "ACCELERATE_FP8_MARGIN",
    "fp8_interval": "ACCELERATE_FP8_INTERVAL", "fp8_amax_history_len": "ACCELERATE_FP8_AMAX_HISTORY_LEN",
    "fp8_amax_compute_algo": "ACCELERATE_FP8_AMAX_COMPUTE_ALGO",
    "fp8_override_linear_precision": "ACCELERATE_FP8_OVERRIDE_LINEAR_PRECISION",
    "fp8_use_autocast_during_eval": "ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL",
}


@hookimpl
def drivetrain_add_launch_arguments(parser):
    group = parser.add_argument_group("FP8 (Transformer Engine)", "the fp8 recipe (plugin transformer_engine)")
    group.add_argument("--fp8-format", type=str.upper, choices=("HYBRID", "E4M3", "E5M2"),
                       help="fp8 format: HYBRID (E4M3 forward, E5M2 backward), E4M3 or E5M2")
    group.add_argument("--fp8-margin", type=int, help="margin of the scaling factor")
    group.add_argument("--fp8-interval", type=int, help="steps between scaling-factor updates")
    group.add_argument("--fp8-amax-history-len", type=int, help="length of the amax history")
    group.add_argument("--fp8-amax-compute-algo", choices=("max", "most_recent"), help="amax over the history")
    group.add_argument("--fp8-override-linear-precision", metavar="FPROP,DGRAD,WGRAD",
                       help="three booleans: which GEMMs of a linear layer stay in high precision")
    group.add_argument("--fp8-use-autocast-during-eval", action="store_true", default=None,
                       help="run fp8_autocast in eval mode too")


@hookimpl
def drivetrain_launch_environment(args):
    from drivetrain.plugin_api.environment import as_env_value

    return {variable: as_env_value(getattr(args, option)) for option, variable in VARIABLES.items()
            if getattr(args, option, None) is not None}
